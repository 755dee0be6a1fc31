"""Where training stands, and what a checkpoint records of it."""

from __future__ import annotations

from partgnn.train.run_directory.state import TrainState


def test_steps_and_epochs_are_counted():
    state = TrainState()
    state.record_step(0.5, 2.0, 0.25)
    state.record_step(1.5, 1.0, 0.75)
    assert (state.step, state.step_in_epoch, state.totals.steps) == (2, 2, 2)
    assert state.totals.mean(state.totals.loss) == 1.0
    state.next_epoch()
    assert (state.epoch, state.step, state.step_in_epoch, state.totals.steps) == (1, 2, 0, 0)


def test_a_checkpoints_record_restores_the_state():
    state = TrainState(epoch=3, step=40, step_in_epoch=4, score_cut=0.7)
    state.record_step(0.1, 1.0, 0.0)
    record = state.as_checkpoint(wall_time_s=12.5)
    assert set(record) == {"epoch", "step", "step_in_epoch", "totals", "score_cut",
                           "wall_time_s"}  # fmt: skip
    again = TrainState.from_checkpoint(record)
    assert again == TrainState(**{**state.__dict__, "earlier_wall_s": 12.5})


def test_a_checkpoint_from_before_the_wall_time_was_recorded():
    record = TrainState(step=5).as_checkpoint(wall_time_s=1.0)
    del record["wall_time_s"], record["score_cut"]
    again = TrainState.from_checkpoint(record)
    assert again.earlier_wall_s == 0.0 and again.score_cut is None and again.step == 5
