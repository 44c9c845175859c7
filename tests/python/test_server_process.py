"""stagger's processes as a script that reads their output sees them: stdout
holds what they print themselves; UCX's messages are log lines on stderr."""
import os
import subprocess

from conftest import bin_dir


# UCX warns about a UCX_ variable it does not know, on stdout by default.
UCX_WARNS = dict(os.environ, UCX_WARN_UNUSED_ENV_VARS="y",
                 UCX_STAGGER_NOT_AN_OPTION="1")
WARNING = "W ucx: parser.c"


def test_ucx_warnings_go_to_stderr_and_the_ready_line_comes_first(tmp_path):
    proc = subprocess.Popen(
        [os.path.join(bin_dir(), "stagger-server"), "--data",
         str(tmp_path / "data"), "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=UCX_WARNS)
    try:
        line = proc.stdout.readline()
        assert line.startswith("stagger-server ready grpc="), line
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out == "", out
    assert "unused env variable: UCX_STAGGER_NOT_AN_OPTION" in err, err
    assert WARNING in err, err


def test_the_cli_prints_its_own_output_alone():
    r = subprocess.run([os.path.join(bin_dir(), "stagger"), "demo"],
                       capture_output=True, text=True, env=UCX_WARNS,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "stagger demo: OK" in r.stdout, r.stdout
    assert "UCX" not in r.stdout, r.stdout
    assert WARNING in r.stderr, r.stderr
