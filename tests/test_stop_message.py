"""A stopped run says where its checkpoint is once, not once per output channel."""

import logging

from sebulba import train
from sebulba.runtime.stop_signals import StopSignals
from tests.helpers import load_config


def test_a_stopped_run_prints_its_stop_message_once(tmp_path, capfd, caplog):
    config = load_config("ppo_cartpole", "smoke")
    config.log.tensorboard = False
    signals = StopSignals()
    signals.received = "SIGTERM"  # As if it had arrived during the first update.
    with caplog.at_level(logging.INFO):
        train.train(config, str(tmp_path), stop_signals=signals)
    out, err = capfd.readouterr()
    text = out + err + caplog.text
    assert text.count("sebulba: stopped by SIGTERM after update 1/4") == 1, text[-3000:]
    assert "checkpoint saved to" in out
