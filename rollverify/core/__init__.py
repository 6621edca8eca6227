"""The paper's rules, as pure functions over tensors (the bottom of rollverify but infra/):

off_policy_shift.py  token and sequence OPS: how far a cached token is from the policy
verify.py            two-stage verification: how much of each cached trajectory to keep
switching.py         the acceptance rate's window and the one-way switch to on-policy
filters.py           the staleness and OPS sample filters
sampling.py          truncated sampling (top-k, top-p): what an engine may sample
methods.py           the methods compared, each as the switches it sets
corrections.py       the peers' off-policy corrections (TIS, MIS, IcePop, M2PO, ...)
argument_checks.py   the argument checks these functions share
"""
