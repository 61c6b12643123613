"""``core.store.advice``: what a red diagnostic suggests, with the config change that applies it,
on summaries built from known values (each rule, and none for a healthy run)."""

from __future__ import annotations

import dataclasses

from core.config import config_from_dict
from core.store.advice import ESS_TARGET, advise
from core.store.diagnostics import ScalarSummary
from core.store.run_summary import RunSummary


def _row(name, rhat=1.0, ess=2000.0):
    return ScalarSummary(name=name, mean=0.0, sd=1.0, q5=-1.6, q50=0.0, q95=1.6, mcse_mean=0.01,
                         ess_bulk=ess, ess_tail=ess, rhat=rhat, chain_means=(0.0, 0.0))


def _summary(rows, draws=2000, divergences=0):
    return RunSummary(status="finished", progress={"draws": draws}, rows=rows, divergences=divergences,
                      acceptance=0.8, step_size=[0.1, 0.1], gradient_evaluations=1000, ess_min=100.0)


def _config(tmp_path, preconditioner="fourier", algorithm="mclmc", index=None, mask=False, interweave=False):
    (tmp_path / "d.npy").write_bytes(b"")
    data = {"path": "d.npy", "noise_sigma": 0.5, **({"mask": "m.npy"} if mask else {})}
    document = {"model": {"kind": "field"}, "data": data,
                "prior": {"kind": "power_law", "amplitude": 100.0, "k_pivot": 0.1,
                          "index": index if index is not None else {"dist": "normal", "loc": -2.0, "scale": 0.5}},
                "sampler": {"algorithm": algorithm, "preconditioner": preconditioner, "num_warmup": 500,
                            "num_samples": 1000, "target_accept": 0.8, "interweave": interweave}}
    return config_from_dict(document, base_dir=tmp_path)


def test_slow_hyperparameters_suggest_the_conditional_preconditioner(tmp_path):
    config = _config(tmp_path)
    advice = advise(_summary([_row("index", rhat=1.3, ess=12.0), _row("lp", rhat=1.2)]), config)
    assert len(advice) == 1 and advice[0].changes == {"sampler.preconditioner": "conditional"}
    assert "index 1.3" in advice[0].text and "'fourier'" in advice[0].text
    # already conditional: interweaving where it is off (a sampler with an accept step), else a
    # longer warmup
    off = _config(tmp_path, preconditioner="conditional", algorithm="mams")
    advice = advise(_summary([_row("index", rhat=1.3), _row("lp")]), off)
    assert [a.changes for a in advice] == [{"sampler.interweave": True}]
    assert "index 1.3" in advice[0].text and "Interweaving draws the spectrum again" in advice[0].text
    for conditional in (_config(tmp_path, preconditioner="conditional", algorithm="mams", interweave=True),
                        _config(tmp_path, preconditioner="conditional")):         # MCLMC: no move
        advice = advise(_summary([_row("index", rhat=1.3), _row("lp")]), conditional)
        assert [a.changes for a in advice] == [{"sampler.num_warmup": 1000}]
    # the white-noise latent has no centred move: the longer warmup
    white = _config(tmp_path, preconditioner="diagonal", algorithm="mams")
    white = dataclasses.replace(white, field=dataclasses.replace(white.field, parameterisation="white_noise"))
    assert [a.changes for a in advise(_summary([_row("index", rhat=1.3), _row("lp")]), white)] == \
        [{"sampler.num_warmup": 1000}]


def test_few_draws_scale_the_run_and_divergences_raise_the_target(tmp_path):
    config = _config(tmp_path, algorithm="nuts", preconditioner="diagonal", index=-2.0)
    advice = advise(_summary([_row("lp", ess=100.0)], divergences=3), config)
    assert advice[0].changes["sampler.num_samples"] >= 1000 * ESS_TARGET / 100.0
    assert advice[1].changes == {"sampler.target_accept": 0.9}
    # MCLMC has no target acceptance: its divergences get no such advice
    mclmc = dataclasses.replace(config, sampler=dataclasses.replace(config.sampler, algorithm="mclmc"))
    assert [a.changes for a in advise(_summary([_row("lp")], divergences=3), mclmc)] == []


def test_a_healthy_run_or_too_few_draws_get_none(tmp_path):
    config = _config(tmp_path)
    assert advise(_summary([_row("index"), _row("lp")]), config) == []
    assert advise(_summary([_row("index", rhat=2.0), _row("lp")], draws=10), config) == []


def test_mclmc_with_sampled_p_k_on_coupled_modes_is_told_of_its_bias_even_when_green(tmp_path):
    """R-hat and ESS cannot show MCLMC's bias in the hyperparameters where a mask couples the
    modes (bench/hyper_efficiency.py): a healthy run gets the advice to use MAMS, which New from
    data writes there; not with MAMS, nor with P(k) fixed, nor without a mask (the test above)."""
    from core.config.schema import COUPLED_HYPER_SAMPLER

    masked = _config(tmp_path, preconditioner="conditional", mask=True)
    advice = advise(_summary([_row("index"), _row("lp")]), masked)
    assert [a.changes for a in advice] == [{f"sampler.{k}": v for k, v in COUPLED_HYPER_SAMPLER.items()}]
    assert advice[0].changes == {"sampler.algorithm": "mams"}
    assert advice[0].text.startswith("MCLMC has no accept step") and "data's mask coupling" in advice[0].text
    assert "which R-hat and ESS cannot show" in advice[0].text
    # a red hyperparameter: before the longer warmup (MAMS mixed band powers under a slab where
    # MCLMC's chains disagreed, R-hat 1.20-1.43, with the same warmup: docs/benchmarks.md)
    red = advise(_summary([_row("index", rhat=1.3), _row("lp")]), masked)
    assert [a.changes for a in red] == [{"sampler.algorithm": "mams"}, {"sampler.num_warmup": 1000}]
    assert "index: red here" in red[0].text and "cannot show" not in red[0].text
    # with "fourier" the centring comes first: without it MAMS is pinned as MCLMC is
    fourier = advise(_summary([_row("index", rhat=1.3), _row("lp")]), _config(tmp_path, mask=True))
    assert [a.changes for a in fourier] == [{"sampler.preconditioner": "conditional"}, {"sampler.algorithm": "mams"}]
    # only lp red: the hyperparameters are green, the MAMS advice comes after
    lp_red = advise(_summary([_row("index"), _row("lp", rhat=1.3)]), masked)
    assert [a.changes for a in lp_red] == [{"sampler.num_warmup": 1000}, {"sampler.algorithm": "mams"}]
    for other in (_config(tmp_path, preconditioner="conditional", mask=True, algorithm="mams"),
                  _config(tmp_path, preconditioner="conditional", mask=True, index=-2.0)):
        assert advise(_summary([_row("index"), _row("lp")]), other) == []


def test_a_slab_mask_under_the_conditional_preconditioner_couples_nothing(tmp_path):
    """Whole planes missing (the run's stored mask, read only where the rule needs it): with
    "conditional" the state is independent of P(k) (``core.engine.slab_conditional``), so MCLMC
    gets no advice to use MAMS; a mask of another shape, or "fourier" over the slab, still does."""
    import numpy as np

    slab = np.ones((8, 8, 8), bool)
    slab[:2] = False
    holes = slab.copy()
    holes[4:6, 4:6, 4:6] = False
    reads = []

    def stored(mask):
        def read():
            reads.append(1)
            return mask
        return read

    masked = _config(tmp_path, preconditioner="conditional", mask=True)
    assert advise(_summary([_row("index"), _row("lp")]), masked, mask=stored(slab)) == []
    assert len(reads) == 1
    bias = advise(_summary([_row("index"), _row("lp")]), masked, mask=stored(holes))
    assert [a.changes for a in bias] == [{"sampler.algorithm": "mams"}]
    fourier = advise(_summary([_row("index"), _row("lp")]), _config(tmp_path, mask=True), mask=stored(slab))
    assert [a.changes for a in fourier] == [{"sampler.algorithm": "mams"}]
    # P(k) fixed: nothing read
    reads.clear()
    advise(_summary([_row("index"), _row("lp")]), _config(tmp_path, preconditioner="conditional", mask=True,
                                                          index=-2.0), mask=stored(slab))
    assert reads == []
