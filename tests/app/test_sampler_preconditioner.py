"""The Sampler panel's mass-matrix row: a choice of sampler.preconditioner, saved as the key the
CLI reads, and its refusal with the white-noise parameterisation shown next to it."""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox

from core.config import load_config
from support.gui import message_of, tiny_case


def test_the_preconditioner_choice_is_saved_and_checked(make_window, tmp_path):
    window = make_window(tiny_case(tmp_path), engine=None)
    box = window.findChild(QComboBox, "sampler.preconditioner")
    assert [box.itemData(i) for i in range(box.count())] == ["identity", "diagonal", "fourier", "conditional"]
    assert box.currentData() == "identity"
    box.setCurrentIndex(box.findData("fourier"))
    assert window.state["sampler.preconditioner"] == "fourier" and window.errors == {}
    out = tmp_path / "saved.toml"
    assert window.save_config(out)
    assert load_config(out).sampler.preconditioner == "fourier"
    latent = window.findChild(QComboBox, "field.parameterisation")
    latent.setCurrentIndex(latent.findData("white_noise"))
    assert "needs field.parameterisation" in message_of(window, "sampler.preconditioner")
    latent.setCurrentIndex(latent.findData("whitened"))
    assert message_of(window, "sampler.preconditioner") == "" and window.errors == {}


def test_a_short_microcanonical_warmup_is_pointed_out_next_to_the_run_length(make_window, tmp_path):
    window = make_window(tiny_case(tmp_path, warmup=10, samples=300), engine=None)
    panel = window.panel["sampler"]
    algorithm = window.findChild(QComboBox, "sampler.algorithm")
    assert "tunes its step size" not in panel.info.text()            # HMC: its own adaptation
    for name in ("mclmc", "mams"):
        algorithm.setCurrentIndex(algorithm.findData(name))
        text = panel.info.text()
        assert f"{name.upper()} tunes its step size" in text and "100 here" in text, text
    window.state.set("sampler.num_warmup", 100)
    assert "tunes its step size" not in panel.info.text()            # a third of the draws: enough
    assert "400 steps per chain" in panel.info.text()


def test_the_interweaving_box_is_saved_and_set_by_the_advice_key(make_window, tmp_path):
    """sampler.interweave: a check box on the Sampler panel, saved as the key the engine reads;
    the state (which the Diagnostics view's advice sets) checks it."""
    from PySide6.QtWidgets import QCheckBox

    window = make_window(tiny_case(tmp_path), engine=None)
    box = window.findChild(QCheckBox, "sampler.interweave")
    assert box is not None and not box.isChecked() and window.state["sampler.interweave"] is False
    box.setChecked(True)
    assert window.state["sampler.interweave"] is True
    out = tmp_path / "saved.toml"
    assert window.save_config(out)
    assert load_config(out).sampler.interweave is True
    window.state.set("sampler.interweave", False)
    assert not box.isChecked()
