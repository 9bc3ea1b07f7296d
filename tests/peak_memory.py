"""The peak memory of one refseg command, measured in a child process of its own."""
from __future__ import annotations

import subprocess
import sys

#: Runs the imports in argv[1], notes the resident memory they leave (VmRSS), runs the code in
#: argv[2], then prints its exit code and both figures in kilobytes: the resident memory after
#: the imports and the peak (VmHWM of its own address space). Not ru_maxrss: Linux folds the
#: parent's peak into a child's at exec, so a child of pytest would report pytest's size.
_PEAK_CHILD = """
import sys
def status(field):
    with open('/proc/self/status') as lines:
        return next(int(line.split()[1]) for line in lines if line.startswith(field))
exec(compile(sys.argv[1], '<imports>', 'exec'))
resident = status('VmRSS:')
code = 0
try:
    exec(compile(sys.argv[2], '<measured>', 'exec'))
except SystemExit as stop:
    code = stop.code or 0
print('MEMORY', code, resident, status('VmHWM:'))
"""


def command_peak(imports: str, argv: list[str], cwd) -> tuple[int, int]:
    """(exit status, bytes of peak resident memory above what ``imports`` leave resident) of
    ``refseg`` run with ``argv`` (its first item ``"refseg"``) in a fresh process."""
    done = subprocess.run([sys.executable, "-P", "-c", _PEAK_CHILD, imports,
                           f"import sys\nsys.argv = {argv!r}\nimport refseg.__main__\n"],
                          cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0 and "MEMORY" in done.stdout, done.stderr[-3000:]
    code, resident, peak = (int(v) for v in done.stdout.split("MEMORY")[-1].split())
    return code, (peak - resident) * 1024
