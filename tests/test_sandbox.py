"""rollverify/tools/sandbox.py: what model-written Python in run_python cannot do, each tried
for real (no mocks) and each bounded so that a broken sandbox cannot take this machine down:
the bombs are finite, every run has a timeout, processes carry a marker and are killed after.
docs/sandbox.md lists which breakage of the sandbox each test was seen to catch."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rollverify.tools.sandbox import (
    AS_ROOT,
    IN_USER_NAMESPACE,
    PROCESS_LIMIT,
    SandboxUnavailable,
    choose_isolation,
    run_python,
)
from tests.polling import wait_until

REPO = Path(__file__).resolve().parents[1]


def _isolation() -> str | None:
    try:
        return choose_isolation()
    except SandboxUnavailable:
        return None


pytestmark = pytest.mark.skipif(_isolation() is None, reason="no namespaces here (unshare)")


@pytest.fixture
def marker():
    """A unique word for the argv of the processes a test starts; any left are killed after."""
    word = f"rollverify-sandbox-test-{uuid.uuid4().hex}"
    yield word
    for pid in processes_with(word):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def processes_with(marker: str) -> list[int]:
    """The machine's processes with `marker` in their command line (from /proc)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if marker.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
    return found


def daemon_with(marker: str) -> str:
    """Code that starts a sleeping child in a session of its own, `marker` in its argv, and
    prints "started" once it runs."""
    return f"""
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)", "{marker}"],
                         start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print("started" if child.poll() is None else "not started", flush=True)
"""


def test_correct_code_returns_its_output_reads_stdin_and_exits_with_its_code():
    code = "import sys\nprint(input()[::-1])\nprint('to stderr', file=sys.stderr)\nsys.exit(3)"
    result = run_python(code, stdin="abc\n", timeout_s=10)
    assert (result.stdout, result.stderr) == ("cba\n", "to stderr\n")
    assert (result.exit_code, result.timed_out, result.killed) == (3, False, False)
    assert result.isolation == (AS_ROOT if os.geteuid() == 0 else IN_USER_NAMESPACE)


def test_the_programs_cpu_time_comes_back_and_a_timeout_leaves_it_unread():
    busy = "import time\nstart = time.process_time()\nwhile time.process_time() - start < 0.3: pass"
    result = run_python(busy, timeout_s=10)
    assert result.exit_code == 0 and 0.3 <= result.cpu_seconds <= result.seconds
    assert run_python("import time\ntime.sleep(1)", timeout_s=10).cpu_seconds < 0.25
    assert run_python("while True: pass", timeout_s=1).cpu_seconds is None


def test_output_is_cut_at_max_output_bytes_and_bad_bytes_are_replaced():
    code = "import sys\nsys.stdout.buffer.write(b'\\xff' + b'a' * 999)"
    result = run_python(code, max_output_bytes=100)
    assert result.truncated and result.stdout == "\ufffd" + "a" * 99


def test_an_infinite_loop_times_out_in_about_timeout_s_and_leaves_nothing(marker):
    result = run_python(daemon_with(marker) + "while True: pass", timeout_s=1)
    assert result.stdout == "started\n"
    assert result.timed_out and result.killed and result.exit_code is None
    assert 1 <= result.seconds < 2.5
    assert processes_with(marker) == []


def test_a_memory_bomb_is_stopped_and_this_process_is_unaffected():
    # Bounded at 1 GiB written (not just reserved), should the memory limit be missing.
    code = "chunks = [b'x' * (64 << 20) for _ in range(16)]\nprint('survived')"
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = run_python(code, memory_mb=256, timeout_s=20)
    assert "survived" not in result.stdout
    assert result.exit_code != 0 and (result.killed or "MemoryError" in result.stderr)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before < 64 << 10  # KiB


def test_a_fork_bomb_is_held_at_the_process_limit_and_leaves_nothing(marker):
    # Exponential, but at most 2**8 processes should the limits fail; each writes one "x".
    code = f"""
import os, sys, time
if sys.argv[-1] != "{marker}":  # the marker in every process's argv, for the check below
    os.execv(sys.executable, [sys.executable, "-I", sys.argv[0], "{marker}"])
for _ in range(8):
    try:
        if os.fork() == 0:
            os.write(1, b"x")
    except OSError:  # the process limit
        pass
time.sleep(1)
"""
    result = run_python(code, timeout_s=10)
    # stopped at the limit (the launcher counts too where it shares the program's uid)
    assert PROCESS_LIMIT - 2 <= result.stdout.count("x") < PROCESS_LIMIT, result
    assert processes_with(marker) == []


def test_a_fork_bomb_does_not_starve_a_concurrent_program(marker):
    """Rewards are scored in parallel sandboxes: a program's fork bomb must not make another
    program's fork fail (the process limit counts a uid's processes in a user namespace: a
    uid of each run's own as root, a user namespace of its own otherwise)."""
    bomb = f"""
import os, sys, time
if sys.argv[-1] != "{marker}":
    os.execv(sys.executable, [sys.executable, "-I", sys.argv[0], "{marker}"])
for _ in range(8):
    try:
        os.fork()
    except OSError:
        pass
time.sleep(2)
"""
    with ThreadPoolExecutor(1) as pool:
        bombing = pool.submit(run_python, bomb, timeout_s=10)
        deadline = time.monotonic() + 8
        while len(processes_with(marker)) < PROCESS_LIMIT - 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(processes_with(marker)) >= PROCESS_LIMIT - 2, "the bomb is at its limit"
        result = run_python(daemon_with(f"{marker}-beside"), timeout_s=10)
        assert bombing.result().exit_code == 0
    assert result.stdout == "started\n" and result.exit_code == 0, result


def test_no_connection_to_this_machine_or_outside():
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setblocking(False)
        targets = [["127.0.0.1", server.getsockname()[1]], ["1.1.1.1", 53]]
        code = f"""
import json, socket
outcomes = []
for host, port in {targets!r}:
    try:
        socket.create_connection((host, port), timeout=3).close()
        outcomes.append("connected")
    except OSError as error:
        outcomes.append(str(error))
print(json.dumps(outcomes))
"""
        result = run_python(code, timeout_s=15)
        outcomes = json.loads(result.stdout)
        assert len(outcomes) == 2 and "connected" not in outcomes, outcomes
        with pytest.raises(BlockingIOError):  # nobody knocked
            server.accept()


def test_writes_outside_its_folder_fail():
    shared = Path(tempfile.mkdtemp(prefix="rollverify-sandbox-test-"))
    shared.chmod(0o1777)  # writable by anyone: only the sandbox's mounts stand in the way
    name = f"rollverify-sandbox-test-{uuid.uuid4().hex}"
    targets = [shared / name, Path(tempfile.gettempdir()) / name, REPO / name]
    code = f"""
for path in {[str(t) for t in targets]!r} + ["mine.txt"]:
    try:
        open(path, "w").write("x")
        print("wrote", path)
    except OSError as error:
        print(type(error).__name__, path)
"""
    try:
        result = run_python(code, timeout_s=10)
        assert "wrote mine.txt" in result.stdout  # its own folder is writable
        assert result.stdout.count("wrote") == 1, result.stdout
        assert not any(target.exists() for target in targets)
    finally:
        shutil.rmtree(shared)
        (REPO / name).unlink(missing_ok=True)


def test_the_users_files_cannot_be_read():
    """A secret in the home directory, and one left world-readable in the temp folder."""
    secret = uuid.uuid4().hex
    in_home = Path.home() / f".rollverify_sandbox_test_secret-{secret}"
    in_temp = Path(tempfile.mkdtemp(prefix="rollverify-sandbox-test-"))
    in_temp.chmod(0o755)
    code = f"""
import os
for path in [{str(in_home)!r}, {str(in_temp / "secret")!r}]:
    try:
        print(open(path).read())
    except OSError as error:
        print(type(error).__name__)
print(os.listdir({str(Path.home())!r}))
"""
    try:
        for path in (in_home, in_temp / "secret"):
            path.write_text(secret)
            path.chmod(0o644)
        result = run_python(code, timeout_s=10)
        assert result.stdout.count("Error") == 2, result.stdout
        assert secret not in result.stdout + result.stderr
    finally:
        in_home.unlink(missing_ok=True)
        shutil.rmtree(in_temp)


def test_no_process_outlives_the_program(marker):
    result = run_python(daemon_with(marker), timeout_s=10)
    assert result.stdout == "started\n" and result.exit_code == 0, result
    assert processes_with(marker) == []


def test_dev_holds_null_zero_full_and_urandom_only_read_only():
    code = """
import os
print(sorted(os.listdir("/dev")))
open("/dev/null", "w").write("x")
print(len(open("/dev/urandom", "rb").read(8)), open("/dev/zero", "rb").read(2))
try:
    os.write(os.open("/dev/full", os.O_WRONLY), b"x")
except OSError as error:
    print(error.errno)
for path in ("/dev/shm/x", "/dev/x"):
    try:
        open(path, "w")
        print("wrote", path)
    except OSError as error:
        print(type(error).__name__)
"""
    result = run_python(code, timeout_s=10)
    lines = result.stdout.splitlines()
    assert lines[0] == "['fd', 'full', 'null', 'urandom', 'zero']", result
    assert lines[1:] == ["8 b'\\x00\\x00'", "28", "FileNotFoundError", "OSError"], result


def test_the_system_call_filter_denies_ptrace_and_new_namespaces():
    """PTRACE_TRACEME and unshare(CLONE_NEWUSER) need no privilege: only the filter stops
    them (EPERM, 1)."""
    code = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print(libc.ptrace(0, 0, 0, 0), ctypes.get_errno())
print(libc.unshare(0x10000000), ctypes.get_errno())
"""
    result = run_python(code, timeout_s=10)
    assert result.stdout.splitlines() == ["-1 1", "-1 1"], result


def test_memory_is_bounded_for_the_whole_sandbox_not_per_process():
    """Every process the program may have grabs what it can: together they stay within
    memory_mb (each gets memory_mb / processes)."""
    code = f"""
import os
def grab():
    chunks = []
    try:
        while len(chunks) < 256:
            chunks.append(bytearray(4 << 20))
    except MemoryError:
        pass
    return len(chunks) * 4
children = []
for _ in range({PROCESS_LIMIT}):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        print(grab(), flush=True)
        os._exit(0)
    children.append(pid)
print(grab(), flush=True)
for pid in children:
    os.waitpid(pid, 0)
"""
    result = run_python(code, memory_mb=256, timeout_s=20)
    grabbed = [int(line) for line in result.stdout.split()]
    assert len(grabbed) >= PROCESS_LIMIT - 1, result  # the processes ran
    assert 0 < sum(grabbed) <= 256, grabbed


def test_sandboxes_at_once_are_bounded_by_the_memory_budget(monkeypatch):
    from rollverify.tools import sandbox
    from rollverify.tools.host_memory import MemoryGate

    def peak(budget_mb: int) -> int:
        gate = MemoryGate(budget_mb)
        monkeypatch.setattr(sandbox, "GATE", gate)
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda _: run_python("import time; time.sleep(0.5)"), range(3)))
        return gate.peak_running

    assert peak(3 * 512) == 3  # room for the three (512 MiB each): they ran together
    assert peak(512 + 256) == 1  # room for one at a time


def test_the_sandbox_dies_with_its_caller(marker):
    """The caller SIGKILLed (no chance to clean up): the program it started goes too."""
    import subprocess
    import sys

    caller = f"""
from rollverify.tools.sandbox import run_python
run_python({daemon_with(marker)!r} + "import time; time.sleep(300)", timeout_s=300)
"""
    started = subprocess.Popen(
        [sys.executable, "-c", caller], cwd=REPO, stderr=subprocess.PIPE, text=True
    )

    def sandboxed() -> list[int]:  # (the caller's own command line holds the marker too)
        return [pid for pid in processes_with(marker) if pid != started.pid]

    # A generous deadline: a CI run under load once saw no daemon within 20 s (unloaded it
    # starts in under a second); a caller that failed ends the wait and shows why.
    wait_until(lambda: sandboxed() or started.poll() is not None, timeout=120, every=0.05)
    running = sandboxed()
    started.kill()
    _, stderr = started.communicate()
    assert running, f"the program started no daemon; the caller said: {stderr[-2000:]}"
    # (the program outlives this wait by far: one that ended by itself would not tell)
    wait_until(lambda: not processes_with(marker), timeout=60, every=0.05)
    assert processes_with(marker) == []
