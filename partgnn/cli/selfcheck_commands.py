"""``partgnn selfcheck`` on the command line (the check: :mod:`partgnn.workflows.selfcheck`)."""

from __future__ import annotations

import argparse

from partgnn.cli.arg_types import timeout_seconds
from partgnn.cli.eval_commands import BACKENDS, TRANSPORTS
from partgnn.partition.assign import METHODS

#: selfcheck's collective timeout [s] when neither --timeout nor PARTGNN_DIST_TIMEOUT sets one.
SELFCHECK_TIMEOUT_S = 120.0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``selfcheck`` to the ``partgnn`` parser."""
    parser = subparsers.add_parser(
        "selfcheck", help="check that halo exchange is exact on the launched processes"
    )
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument(
        "--backend", choices=BACKENDS, default="auto",
        help="torch.distributed backend (auto: NCCL with a GPU per rank, else gloo)",
    )  # fmt: skip
    parser.add_argument("--transport", choices=TRANSPORTS, default="auto")
    parser.add_argument("--method", choices=METHODS, default="metis", help="partition method")
    parser.add_argument(
        "--timeout",
        type=timeout_seconds,
        default=None,
        help="collective timeout [s] (default: PARTGNN_DIST_TIMEOUT, else "
        f"{SELFCHECK_TIMEOUT_S:g})",
    )
    parser.set_defaults(run=run_selfcheck)


def run_selfcheck(args: argparse.Namespace) -> int:
    from partgnn.distributed.session import distributed_session
    from partgnn.workflows.selfcheck import selfcheck

    with distributed_session(
        device=args.device, backend=args.backend, timeout_s=args.timeout,
        default_timeout_s=SELFCHECK_TIMEOUT_S, default_timeout_source="the default",
    ) as context:  # fmt: skip
        result = selfcheck(context, transport=args.transport, method=args.method)
    if context.is_main:
        print(
            f"selfcheck: {result.ranks} ranks ({context.launcher}, {context.backend}, "
            f"{context.device}), {result.method} partition: relative error logits "
            f"{result.logits_error:.1e}, gradients {result.gradients_error:.1e} -> "
            f"{'OK' if result.ok else 'FAILED'}"
        )
    return 0 if result.ok else 1
