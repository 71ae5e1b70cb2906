"""``labkit estimate``, ``labkit hardware``, ``labkit advise`` and ``labkit bench``: the lab from a terminal.

Every value is parsed as a string and converted in the subcommand's module, so that a bad
one, whatever it is, goes through one path: a single line ``labkit: error: <message>`` on
stderr and exit status 2, with the message the API itself raises (it names the field and
the allowed values). Only argparse's own usage errors (an unknown flag) keep argparse's
multi-line form. One module per subcommand, each with ``register(sub)`` and ``run(args)``.
"""

from __future__ import annotations

import argparse
import sys

from labkit.cli import advise, calibrate, estimate, hardware, measure
from labkit.cli.finetune_args import refuse_without_finetune
from labkit.errors import LabkitError

SUBCOMMANDS = (estimate, hardware, advise, measure, calibrate)


def _bench(a: argparse.Namespace) -> int:
    from labkit import bench

    calibration = ["--calibration", a.calibration] if a.calibration else []
    flags = ["--notebooks"] * a.notebooks + ["--quick"] * a.quick + ["--step-time"] * a.step_time
    return bench.main(flags + calibration)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="labkit", description="Memory and storage of large-model training.")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.register(sub)
    bench = sub.add_parser("bench", help="measurement overhead and measured-vs-predicted error")
    bench.add_argument("--notebooks", action="store_true", help="also time each labs/*.ipynb, headless, and run 02's "
                       "and 05's trend studies and notebooks under load (two busy processes)")
    bench.add_argument("--quick", action="store_true", help="fewer steps and configurations")
    bench.add_argument("--calibration", help="a labkit calibrate file: step time predicted on it beside measured")
    bench.add_argument("--step-time", action="store_true", help="only the step-time comparison")
    bench.set_defaults(run=_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        refuse_without_finetune(args)
        return args.run(args)
    except LabkitError as err:
        print("labkit: error: " + " ".join(str(err).split()), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
