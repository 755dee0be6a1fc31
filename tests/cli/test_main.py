"""The ``partgnn`` command as a whole: light to start, quiet, shipped configs by name."""

import subprocess
import sys
from pathlib import Path

import pytest

from partgnn.cli import eval_commands, export_commands
from partgnn.cli.main import build_parser, main
from partgnn.resources import config_names

BIN = Path(sys.executable).parent
#: Modules that take seconds to import; none may load before a command runs.
HEAVY = ("torch", "torch_geometric", "pandas", "scipy", "matplotlib", "h5py", "tqdm")


def test_building_the_parser_imports_no_heavy_module():
    code = (
        "import sys\n"
        "from partgnn.cli.main import build_parser\n"
        "build_parser()\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "command", [[], ["train"], ["partition"], ["evaluate"], ["selfcheck"], ["plan"]]
)
def test_help_answers_without_importing_torch(command):
    code = (
        "import sys\n"
        "from partgnn.cli.main import main\n"
        f"try:\n    main({[*command, '--help']!r})\n"
        "except SystemExit:\n    pass\n"
        "print('torch' in sys.modules, file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "usage: partgnn" in done.stdout
    assert done.stderr.strip() == "False"


def test_the_choices_offered_are_the_pipelines():
    from partgnn.distributed.device import BACKENDS
    from partgnn.distributed.exchange_plan import TRANSPORTS
    from partgnn.export.formats import FORMATS
    from partgnn.metrics.edge_counts import SCORE_CUT
    from partgnn.metrics.track_building import TRACK_BUILDING_METHODS

    assert export_commands.FORMATS == FORMATS
    assert eval_commands.TRANSPORTS == TRANSPORTS
    assert eval_commands.BACKENDS == BACKENDS
    assert eval_commands.SCORE_CUT == SCORE_CUT
    assert eval_commands.TRACK_BUILDING == TRACK_BUILDING_METHODS


def test_a_command_that_imports_torch_prints_no_third_party_warning(tmp_path: Path):
    out = tmp_path / "ev.h5"
    done = subprocess.run(
        [str(BIN / "partgnn"), "simulate", "--events", "1", "--pileup", "1", "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr


def test_configs_lists_and_prints_the_shipped_templates(capsys):
    assert main(["configs"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == config_names() and "demo" in listed
    assert main(["configs", "halo"]) == 0
    assert "mode: halo" in capsys.readouterr().out


def test_configs_of_an_unknown_name_is_a_one_line_error(capsys):
    assert main(["configs", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("partgnn: error: nope: config file not found") and "\n" not in err


@pytest.mark.parametrize("cut", ["1.5", "-0.1", "nan"])
def test_evaluate_refuses_a_cut_outside_0_1(cut, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["evaluate", "s.h5", "--graphs", "g.h5", "--cut", cut])
    assert exit_info.value.code == 2
    assert "must be a score in [0, 1]" in capsys.readouterr().err


def test_an_unexpected_error_is_one_line_that_names_it(monkeypatch, capsys):
    from partgnn.cli import config_commands

    def fail(args):
        raise ZeroDivisionError("boom\nmore detail")

    monkeypatch.delenv("PARTGNN_DEBUG", raising=False)
    monkeypatch.setattr(config_commands, "run_configs", fail)
    assert main(["configs"]) == 1
    assert capsys.readouterr().err == (
        "partgnn: error: ZeroDivisionError: boom (PARTGNN_DEBUG=1 shows the traceback)\n"
    )
    assert main(["--debug", "configs"]) == 1  # the traceback, and the same status
    assert "Traceback" in capsys.readouterr().err


def test_debug_keeps_the_exit_status_of_bad_input(tmp_path, capsys):
    assert main(["--debug", "info", str(tmp_path / "missing.h5")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "missing.h5: file not found" in err
