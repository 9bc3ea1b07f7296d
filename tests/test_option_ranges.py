"""Every numeric option has a stated range, checked before anything is read or written: a bad
value ends with one line on stderr, exit status 2, and no output folder."""
import subprocess
import sys

import pytest

from checkout import run_refseg

# argument validation (refseg.run.config.check_range and its kin): no claim element
pytestmark = pytest.mark.infrastructure

TRAIN = ["train", "DATA", "--out", "OUT", "--epochs", "1", "--input-size", "32x64"]
CASES = [
    (["--learning-rate", "inf"], "learning rate"),
    (["--learning-rate", "1e30"], "learning rate"),
    (["--learning-rate", "nan"], "learning rate"),
    (["--learning-rate-step", "2:inf"], "the rate"),
    (["--epochs", "0"], "epochs"),
    (["--epochs", "-1"], "epochs"),
    (["--epochs", "99999999"], "epochs"),
    (["--batch-size", "0"], "batch_size"),
    (["--batch-size", "100000"], "batch_size"),
    (["--jobs", "0"], "jobs"),
    (["--seed", "-3"], "seed"),
    (["--input-size", "0x0"], "input size"),
    (["--input-size", "17x33"], "input size"),
    (["--input-size", "32000x32000"], "input size"),
    (["--input-size", "abc"], "input size"),
]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ranges") / "data"
    result = run_refseg("synth", "--count", "5", "--out", folder, "--size", "48x96")
    assert result.returncode == 0, result.stderr
    return folder


@pytest.mark.parametrize("extra, named", CASES)
def test_train_refuses_an_option_out_of_range_before_any_work(tmp_path, data, extra, named):
    out = tmp_path / "run"
    args = [str(data) if a == "DATA" else str(out) if a == "OUT" else a for a in TRAIN]
    result = run_refseg(*args, *extra)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("refseg: error: ") and named in result.stderr.lower()
    assert not out.exists()


#: The network (``refseg.models`` itself is a light package: its names load when first used),
#: its ops, the kernels, the work of each verb, SciPy.
HEAVY = ("refseg.models.model", "refseg.autograd", "refseg._kernels", "refseg.run.training",
         "refseg.run.demo", "refseg.data.synthetic", "scipy")


@pytest.mark.parametrize("verb", ["train", "demo", "synth"])
def test_train_demo_and_synth_check_their_options_before_the_heavy_imports(tmp_path, data,
                                                                           verb):
    """A refused option costs the imports of the settings alone: neither the network, the
    compiled kernels, the weld generator nor SciPy is loaded when `refseg train`, `refseg demo`
    or `refseg synth` says no."""
    out = tmp_path / "out"
    args, named = {"train": ([verb, str(data), "--out", str(out), "--epochs", "0"], "epochs"),
                   "demo": ([verb, "--out", str(out), "--epochs", "0"], "epochs"),
                   "synth": ([verb, "--out", str(out), "--count", "0"], "--count")}[verb]
    script = ("import sys\n"
              "from refseg.cli import main\n"
              f"status = main({args!r})\n"
              f"print(status, [m for m in {HEAVY!r} if m in sys.modules])\n")
    result = subprocess.run([sys.executable, "-P", "-c", script], capture_output=True,
                            text=True)
    assert result.stdout.strip() == "2 []", (result.stdout, result.stderr)
    assert named in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert not out.exists()


#: What parsing must not load: the help states every default from leaf modules alone.
PARSING_LOADS_NOT = ("numpy", "PIL", "refseg.images", "refseg.claim1.features", *HEAVY)


@pytest.mark.parametrize("args", [["--version"], ["edges", "--help"], ["synth", "--help"],
                                  ["model", "summary", "--help"],
                                  ["golden", "check", "--help"]])
def test_parsing_loads_neither_numpy_nor_pillow(args):
    """`refseg --version` and a verb's help read their defaults and choices (the image size
    limit, sigma, the parts of a bundle, the weld and input sizes) from leaf modules: NumPy,
    Pillow and the modules acting on those values stay unloaded."""
    script = ("import sys\n"
              "from refseg.cli import main\n"
              "try:\n"
              f"    main({args!r})\n"
              "except SystemExit as stop:\n"
              "    status = stop.code\n"
              f"print(status, [m for m in {PARSING_LOADS_NOT!r} if m in sys.modules], "
              "file=sys.stderr)\n")
    result = subprocess.run([sys.executable, "-P", "-c", script], capture_output=True,
                            text=True)
    assert result.stderr.strip() == "0 []", (result.stdout, result.stderr)
    assert result.stdout.startswith("refseg " if args == ["--version"] else "usage: refseg ")


@pytest.mark.parametrize("extra, named", [
    (["--input-size", "50x50"], "input size"), (["--jobs", "0"], "jobs"),
    (["--count", "1000000"], "--count"), (["--epochs", "0"], "--epochs")])
def test_demo_refuses_an_option_out_of_range_at_once(tmp_path, extra, named):
    out = tmp_path / "demo"
    result = run_refseg("demo", "--out", out, *extra)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert named in result.stderr and not out.exists()


@pytest.mark.parametrize("extra, named", [
    (["--count", "99999999999999999999"], "--count"), (["--count", "0"], "--count"),
    (["--count", "2", "--seed", str(2 ** 32 - 1)], "--seed"), (["--count", "1", "--seed", "-1"],
                                                                "--seed")])
def test_synth_refuses_a_count_or_seed_out_of_range_at_once(tmp_path, extra, named):
    out = tmp_path / "set"
    result = run_refseg("synth", "--out", out, *extra)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert named in result.stderr and not out.exists()


@pytest.mark.parametrize("sigma", ["1e308", "1e-300", "nan", "-1"])
def test_edges_refuses_a_sigma_out_of_range(tmp_path, data, sigma):
    out = tmp_path / "edges"
    result = run_refseg("edges", data / "images" / "weld_00000.png", "--out", out,
                        "--sigma", sigma)
    assert result.returncode == 2 and "sigma: expected a number from 0.01 to 1000" in \
        result.stderr and result.stderr.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize("seeds", ["1", "0", "101"])
def test_demo_seeds_out_of_range_fail_before_any_work(tmp_path, seeds):
    out = tmp_path / "out"
    result = run_refseg("demo", "--out", out, "--seeds", seeds, "--count", "5",
                        "--test-count", "1", "--epochs", "1", "--input-size", "32x64")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "--seeds must be an integer from 2" in result.stderr and not out.exists()
