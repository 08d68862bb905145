"""``SignalWatch`` on its own (train/preemption.py): framework-free, so the TensorFlow engine reuses it without
importing torch, and a second signal ends the process even while the main thread waits in a long native
call (a TensorFlow step, a CUDA synchronisation), where Python would run its handler only once, afterwards."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import hashlib, sys
    from gpulab.core.preemption import SignalWatch

    with SignalWatch():
        print("ready", flush=True)
        # A native call that releases the GIL and runs no Python handler until it returns (a minute or more).
        hashlib.pbkdf2_hmac("sha256", b"x", b"y", 2 * 10**8)
        print("returned", flush=True)
    """
)


def test_the_watch_and_its_callback_import_no_framework():
    code = (
        "import sys; import gpulab.core.preemption, gpulab.core.callbacks.preemption; "
        "print(sorted(m for m in ('torch', 'tensorflow', 'keras') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_second_signal_during_a_long_native_call_ends_the_process_at_once():
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    # The first signal is told at once, though the main thread is still inside the call.
    assert proc.stderr.readline().startswith("gpulab: SIGTERM: finishing this step")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)  # the call alone would take a minute or more
    assert proc.returncode == 143
    assert "second SIGTERM: stopping now, without a checkpoint" in err
    assert "returned" not in out
