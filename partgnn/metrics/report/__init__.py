"""The comparison report of training runs: a markdown file with tables, PNG plots and findings.

It answers what halo exchange buys over naive sectorisation (boundary-edge efficiency) and what
each costs (step time, peak memory per rank, bytes exchanged), from the files of run directories.

The package's parts: :mod:`.runs` (reading a run), :mod:`.tables`, :mod:`.plots`,
:mod:`.findings` and :mod:`.markdown` (the report itself).
"""

from partgnn.metrics.evaluation_results import EVALUATION_NAME
from partgnn.metrics.report.findings import findings
from partgnn.metrics.report.markdown import REPORT_NAME, render_report, write_comparison
from partgnn.metrics.report.runs import RunRecord, load_run
from partgnn.metrics.report.tables import evaluation_table, summary_table

__all__ = [
    "EVALUATION_NAME",
    "REPORT_NAME",
    "RunRecord",
    "evaluation_table",
    "findings",
    "load_run",
    "render_report",
    "summary_table",
    "write_comparison",
]
