"""The shared GUI test case is itself a valid config."""

from support.gui import tiny_case


def test_tiny_case_is_a_valid_config(tmp_path):
    from core.config import load_config

    config = load_config(tiny_case(tmp_path))
    assert config.sampler.num_samples == 20 and config.sampler.chunk_size == 5
    assert config.data_path.exists()
