"""stagger-server as a script that starts it sees it: its stdout holds the
ready line alone, whatever the libraries under it print."""
import os
import subprocess

from conftest import bin_dir


def test_ucx_warnings_go_to_stderr_and_the_ready_line_comes_first(tmp_path):
    # UCX warns about a UCX_ variable it does not know, on stdout by default:
    # the warning must not come before (or instead of) the ready line.
    env = dict(os.environ, UCX_WARN_UNUSED_ENV_VARS="y",
               UCX_STAGGER_NOT_AN_OPTION="1")
    proc = subprocess.Popen(
        [os.path.join(bin_dir(), "stagger-server"), "--data",
         str(tmp_path / "data"), "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert line.startswith("stagger-server ready grpc="), line
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out == "", out
    assert "unused env variable: UCX_STAGGER_NOT_AN_OPTION" in err, err
