"""rvctl: the command line of rollverify."""
