"""Bounded and interruptible waits: wait(timeout), Ctrl-C, exit with a save
in flight. Saves are paced by qos_deadline_s so that they take seconds."""
import contextlib
import os
import select
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import stagger


def paced_save(tmp_path, deadline_s):
    ck = stagger.Checkpointer(servers=f"embedded:{tmp_path}", job="paced",
                              qos_deadline_s=deadline_s)
    data = {"a": np.ones(8 << 20, dtype=np.uint8)}
    return ck, data, ck.save(data, step=1)


def test_wait_with_a_timeout_returns_false_while_the_save_runs(tmp_path):
    ck, data, h = paced_save(tmp_path, 3.0)
    t = time.monotonic()
    assert h.wait(timeout=0.1) is False
    assert 0.05 <= time.monotonic() - t < 1.0
    assert not h.done()
    assert ck.wait_all(timeout=0.05) is False
    with pytest.raises(ValueError):
        h.wait(timeout=-1)
    assert h.wait() is True
    assert h.done()
    assert h.wait(timeout=0) is True
    assert ck.wait_all(timeout=0) is True
    assert ck.steps() == [1]


CHILD = r"""
import sys, time
import numpy as np
import stagger
ck = stagger.Checkpointer(servers="embedded:" + sys.argv[1], job="paced",
                          qos_deadline_s=30)
h = ck.save({"a": np.ones(8 << 20, dtype=np.uint8)}, step=1)
print("waiting", flush=True)
h.wait()
"""


def read_until(stream, text, timeout_s):
    """Reads `stream` until `text` appears or `timeout_s` passes; returns
    what was read and the time it took."""
    out, start = b"", time.monotonic()
    while text.encode() not in out and time.monotonic() - start < timeout_s:
        ready, _, _ = select.select([stream], [], [], 0.05)
        if ready:
            chunk = os.read(stream.fileno(), 4096)
            if not chunk:
                break
            out += chunk
    return out.decode(errors="replace"), time.monotonic() - start


CHILD_SECOND_SAVE = r"""
import sys, time
import numpy as np
import stagger
ck = stagger.Checkpointer(servers="embedded:" + sys.argv[1], job="paced",
                          qos_deadline_s=30)
a = np.ones(8 << 20, dtype=np.uint8)
ck.save({"a": a}, step=1)
print("waiting", flush=True)
try:
    ck.save({"a": a}, step=2)  # waits for step 1 (max_outstanding_saves=1)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    import os
    os._exit(0)
"""


# Ctrl-C raises KeyboardInterrupt in the child, as in a python started from
# a terminal, even where this test runs with SIGINT ignored (a make test
# started in the background of a shell without job control): the child
# would inherit that, and Python leaves an ignored SIGINT ignored.
DEFAULT_SIGINT = ("import signal\n"
                  "signal.signal(signal.SIGINT, signal.default_int_handler)\n")


@contextlib.contextmanager
def interrupted_child(script, tmp_path):
    """Runs `script` with `tmp_path` as its argument, waits for it to print
    "waiting", sends it SIGINT 0.3 s later and yields it; kills it at the
    end if it is still running."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    child = subprocess.Popen([sys.executable, "-c", DEFAULT_SIGINT + script,
                              str(tmp_path)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=env)
    try:
        out, _ = read_until(child.stdout, "waiting", 60)
        assert "waiting" in out
        time.sleep(0.3)
        child.send_signal(signal.SIGINT)
        yield child
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_ctrl_c_interrupts_a_save_waiting_for_the_one_in_flight(tmp_path):
    with interrupted_child(CHILD_SECOND_SAVE, tmp_path) as child:
        out, took = read_until(child.stdout, "interrupted", 10)
        assert "interrupted" in out
        assert took < 1.0
        assert child.wait(timeout=10) == 0


def test_ctrl_c_interrupts_wait_then_abandons_the_save_at_exit(tmp_path):
    with interrupted_child(CHILD, tmp_path) as child:
        err, took = read_until(child.stderr, "Ctrl-C abandons", 10)
        assert "KeyboardInterrupt" in err
        assert took < 1.0, err
        # The exit hook says what it waits for, then a second Ctrl-C ends it.
        assert "waiting at exit for the saves in flight of job 'paced'" in err
        assert "at most about 30 s" in err
        child.send_signal(signal.SIGINT)
        t = time.monotonic()
        rc = child.wait(timeout=10)
        took = time.monotonic() - t
        rest = child.stderr.read().decode()
        assert (rc, "abandoned" in rest) == (130, True), err + rest
        assert took < 1.0, err + rest


def test_server_wait_s_is_an_option_and_is_checked(tmp_path):
    ck = stagger.Checkpointer(servers=f"embedded:{tmp_path}", job="w",
                              server_wait_s=0.5)
    ck.save({"a": np.ones(10, dtype=np.uint8)}, step=1).wait()
    with pytest.raises(stagger.Error) as e:
        stagger.Checkpointer(servers=f"embedded:{tmp_path}", job="w",
                             server_wait_s=-1)
    assert e.value.code == "INVALID_ARGUMENT"
    assert "server_wait_s" in str(e.value)


CHILD_LOAD = r"""
import sys
import numpy as np
import stagger
ck = stagger.Checkpointer(servers=sys.argv[1], job="load")
n = 32 << 20
ck.save({"a": np.ones(n, dtype=np.uint8)}, step=1).wait()
print("saved", flush=True)
sys.stdin.readline()
out = np.zeros(n, dtype=np.uint8)
print("waiting", flush=True)
try:
    ck.load({"a": out})
    print("loaded all", flush=True)
except KeyboardInterrupt:
    print(f"interrupted filled={int(out.sum())} of {n}", flush=True)
    print("reloaded", ck.load({"a": out}), int(out.sum()) == n, "end",
          flush=True)
"""


@contextlib.contextmanager
def child_of_a_stopped_server(script, tmp_path):
    """Starts a stagger-server and `script` (the server's address as its
    argument). Once the child prints "saved", stops the server (SIGSTOP),
    tells the child to go on (a line on its stdin), waits for "waiting" and
    sends the child SIGINT 0.3 s later; yields (server, child). The server
    is continued and both are ended at the end."""
    from conftest import start_server
    server, grpc = start_server(tmp_path / "data")
    child = subprocess.Popen([sys.executable, "-c", DEFAULT_SIGINT + script,
                              grpc],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    try:
        out, _ = read_until(child.stdout, "saved", 60)
        assert "saved" in out
        server.send_signal(signal.SIGSTOP)
        child.stdin.write(b"go\n")
        child.stdin.flush()
        out, _ = read_until(child.stdout, "waiting", 10)
        assert "waiting" in out
        time.sleep(0.3)
        child.send_signal(signal.SIGINT)
        yield server, child
    finally:
        server.send_signal(signal.SIGCONT)
        if child.poll() is None:
            child.kill()
            child.wait()
        server.terminate()
        server.wait(timeout=60)


def test_ctrl_c_stops_a_load_before_it_fetches_the_rest(tmp_path):
    """The server is stopped (SIGSTOP) while the load asks it for the step,
    Ctrl-C comes, then the server goes on: the load fetches nothing more,
    raises KeyboardInterrupt, and the Checkpointer loads normally after."""
    with child_of_a_stopped_server(CHILD_LOAD, tmp_path) as (server, child):
        time.sleep(0.3)
        server.send_signal(signal.SIGCONT)
        out, _ = read_until(child.stdout, " end", 30)
        assert f"interrupted filled=0 of {32 << 20}" in out, out
        assert "reloaded 1 True end" in out, out
        assert child.wait(timeout=30) == 0

CHILD_STEPS = r"""
import sys, time
import numpy as np
import stagger
ck = stagger.Checkpointer(servers=sys.argv[1], job="steps")
ck.save({"a": np.ones(16, dtype=np.uint8)}, step=1).wait()
print("saved", flush=True)
sys.stdin.readline()
print("waiting", flush=True)
t = time.monotonic()
try:
    ck.steps()
    print("listed", flush=True)
except KeyboardInterrupt:
    print(f"interrupted after {time.monotonic() - t:.2f} s", flush=True)
sys.stdin.readline()  # the server goes on
print("again", ck.steps(), "end", flush=True)
"""


def test_ctrl_c_interrupts_steps_on_a_server_that_does_not_answer(tmp_path):
    """With its server stopped, steps() would block up to rpc_timeout_s:
    Ctrl-C raises at once, and the same Checkpointer lists the steps once
    the server goes on."""
    with child_of_a_stopped_server(CHILD_STEPS, tmp_path) as (server, child):
        out, took = read_until(child.stdout, " s\n", 10)
        assert "interrupted after" in out, out
        assert took < 1.0, out
        server.send_signal(signal.SIGCONT)
        child.stdin.write(b"go\n")
        child.stdin.flush()
        out, _ = read_until(child.stdout, " end", 60)
        assert "again [1] end" in out, out
        assert child.wait(timeout=60) == 0


def test_wait_step_waits_for_every_rank_and_names_the_missing(tmp_path):
    """h.wait() is this rank's part; ck.wait_step(step) the whole step. A
    world_size larger than the ranks saving leaves the step partial, and
    wait_step says which ranks are missing."""
    servers = f"embedded:{tmp_path}"
    ck0 = stagger.Checkpointer(servers=servers, job="ws", rank=0,
                               world_size=3)
    data = {"a": np.arange(1000, dtype=np.float32)}
    assert ck0.save(data, step=1).wait() is True
    with pytest.raises(TimeoutError,
                       match=r"step 1 of job 'ws' is still partial: 1 of "
                             r"world size 3 committed; missing ranks 1, 2"):
        ck0.wait_step(1, timeout=0.3)
    with pytest.raises(TimeoutError, match="no rank has committed it"):
        ck0.wait_step(2, timeout=0)
    assert ck0.steps() == []
    for rank in (1, 2):
        ck = stagger.Checkpointer(servers=servers, job="ws", rank=rank,
                                  world_size=3)
        assert ck.save(data, step=1).wait() is True
    assert ck0.wait_step(1, timeout=10) is True
    assert ck0.steps() == [1]
    with pytest.raises(ValueError):
        ck0.wait_step(1, timeout=-1)
    with pytest.raises(stagger.Error, match="steps are >= 0"):
        ck0.wait_step(-1)  # never committed by anyone: no endless wait


def test_the_server_logs_a_step_left_partial_naming_the_missing_ranks(
        tmp_path):
    """A rank that never saves (a wrong world_size) leaves the step partial
    with nothing said in the training loop; the server logs it once, after
    --partial-warn-s, naming the ranks missing. A step that completes is
    not logged."""
    from conftest import bin_dir, listen_address
    log_path = tmp_path / "server.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [os.path.join(bin_dir(), "stagger-server"), "--data",
             str(tmp_path / "data"), "--listen", listen_address(),
             "--partial-warn-s", "1"],
            stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("stagger-server ready grpc="), line
        server = line.split()[2].split("=", 1)[1]
        data = {"a": np.arange(1000, dtype=np.float32)}
        cks = [stagger.Checkpointer(servers=server, job="lost", rank=r,
                                    world_size=4) for r in range(4)]
        # Step 1: ranks 0 and 2 of 4. Step 2: all four. Step 3: rank 3.
        for step, ranks in ((1, (0, 2)), (2, (0, 1, 2, 3)), (3, (3,))):
            for r in ranks:
                assert cks[r].save(data, step=step).wait() is True

        def logged(text, timeout=30):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if text in log_path.read_text():
                    return True
                time.sleep(0.1)
            return False

        assert logged("job 'lost' step 1 is still partial "), \
            log_path.read_text()
        assert logged("job 'lost' step 3 is still partial "), \
            log_path.read_text()
        out = log_path.read_text()
        assert ("after its first commit: 2 of 4 ranks committed, missing "
                "ranks 1, 3 (a rank that did not save the step, or one "
                "started with another world_size); it is neither listed "
                "nor loaded until they commit, and 'stagger rm' deletes "
                "it") in out, out
        assert "1 of 4 ranks committed, missing ranks 0, 1, 2 (" in out, out
        # Step 2 completed before step 3 began: it was never in question.
        assert "step 2 is still partial" not in out, out
        assert out.count("step 1 is still partial") == 1, out
    finally:
        proc.terminate()
        assert proc.wait(timeout=60) == 0


class _Lagging:
    """A Checkpointer whose bookkeeping is still running after its saves'
    handles were answered (the moment between a save's handle turning done
    and the save leaving the in-flight count)."""

    _job = "lagging"
    _deadline_s = 0.0

    def __init__(self, handles_done):
        self._recent = [_Handle(d) for d in handles_done]
        self.waits = []

    def wait_all(self, timeout=None):
        self.waits.append(timeout)
        return timeout is None  # in flight at a glance, done when waited


class _Handle:
    def __init__(self, done):
        self._done = done

    def done(self):
        return self._done


def test_exit_announces_only_saves_that_are_not_durable(capsys):
    waited = _Lagging([True, True])
    pending = _Lagging([True, False])
    for ck, announced in ((waited, False), (pending, True)):
        stagger._live.add(ck)
        try:
            stagger._finish_saves_at_exit()
        finally:
            stagger._live.discard(ck)
        err = capsys.readouterr().err
        # Either way exit waits for the Checkpointer to settle.
        assert ck.waits == [0, None]
        assert ("waiting at exit for the saves in flight of job 'lagging'"
                in err) == announced, err
