"""Tests of partgnn.data.module_map.fit_time: the expected time of a fit on simulated events."""

from partgnn.data.module_map.doublets import SimulatedRun
from partgnn.data.module_map.fit_files import SimulatedEvents
from partgnn.data.module_map.fit_time import expected_fit_time, fit_time_notice


def test_a_fit_expects_longer_with_the_realism_switches():
    assert "expected about 26 min (0.39 s per" in expected_fit_time(4000, 200.0, 1, False)
    line = expected_fit_time(4000, 200.0, 1, True)
    assert "expected about 46 min (0.69 s per" in line and "realism switches" in line


def test_the_notice_counts_every_runs_events_and_says_nothing_without_any():
    runs = [SimulatedRun.parse("1:0:1000"), SimulatedRun.parse("2:1000:3000")]
    notice = fit_time_notice(SimulatedEvents(runs, pileup=200.0, workers=1))
    assert notice is not None and "simulating 4,000 events of pile-up 200" in notice
    assert fit_time_notice(SimulatedEvents([], pileup=200.0, workers=1)) is None


def test_the_notice_goes_to_stderr_with_the_workers_the_fit_uses(capsys):
    from partgnn.data.module_map.fit_time import say_fit_time

    say_fit_time(SimulatedEvents([SimulatedRun.parse("1:0:10")], pileup=3.0, workers=2))
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "simulating 10 events of pile-up 3" in err
    assert "on 2 worker(s)" in err or "on 1 worker(s) of this machine's 1 cores" in err
    say_fit_time(SimulatedEvents([], pileup=3.0, workers=2))
    assert capsys.readouterr().err == ""
