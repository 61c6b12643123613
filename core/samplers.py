"""The samplers Fieldscope runs: one registry entry each, TensorFlow-free.

``SAMPLERS`` maps the config's ``sampler.algorithm`` to a ``SamplerInfo``: its kernel (a class in
``core.engine.samplers``, named here as "module:Class" so that this module imports no TensorFlow),
what the Sampler panel shows for it, how many gradient evaluations a step costs, and its memory
figures (``core.run.resources``). Everything else asks the registry: the config's schema takes
the names from it, the engine's driver the kernel, the panel its labels and fields, the estimates
their figures.

Adding a sampler: a kernel file in ``core/engine/samplers/`` (a subclass of one of its families,
``DualAveragingKernel`` or ``MicrocanonicalKernel``, or a kernel of its own with the same
methods) and one entry here.

Memory figures (``core.run.resources``'s module docstring): ``buffers_per_chain`` W and
``shared_buffers`` S are XLA's grid-sized temporaries of the looped chunk program beyond the
named arrays, per chain and once per run; ``program_bytes`` the compiled program with XLA's
runtime; ``device_programs`` XLA's own account of each chunk program's device buffers
(bench/device_memory.py), by whether stage 2 of the microcanonical warmup has a program of its own
(``core.run.engine_limits.stage2_apart``): the programs a run may compile, each (W, S, draws);
``white_noise_programs`` the same for a white-noise latent (one FFT pair more a gradient: a
sharded field's, ``bench/device_memory.py --shard``, 32^3, HMC's leapfrog looped, 2026-12-06), by
(preconditioner, stage 2 apart): an adapted diagonal always has its stage 2 apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SamplerInfo", "SAMPLERS", "ALGORITHMS", "sampler_info", "MAMS_STEPS_PER_L", "MAMS_HYPER_STEPS_PER_L"]

_MiB = 2**20

#: MAMS's mean number of integration steps a draw (its trajectory length L over its step size):
#: the reference's target_num_integration_steps = 2 (BlackJAX 1.7) ...
MAMS_STEPS_PER_L = 2.0
#: ... and 8 where P(k) hyperparameters are sampled with the field: 2 steps with a fresh velocity
#: each moved a hyperparameter by about its width given the field, under a mask a fraction of its
#: posterior width, as a random walk (bench/hyper_efficiency.py slab2, seed 1: R-hat 1.044, bulk
#: ESS 42; 8 steps 1.002, 1391; ``core.engine.adaptation.mams_tuning``, docs/benchmarks.md)
MAMS_HYPER_STEPS_PER_L = 8.0


@dataclass(frozen=True)
class SamplerInfo:
    name: str                          # sampler.algorithm
    label: str                         # the Sampler panel's choice
    kernel: str                        # "module:Class" of its kernel (core.engine.samplers)
    microcanonical: bool               # tuned in the microcanonical stages (two chunk programs)
    leapfrog_steps: bool               # sampler.num_leapfrog_steps applies (the panel shows it)
    target_accept: bool                # sampler.target_accept applies
    fixed_gradients: int | None        # gradients a step when fixed (None: L, the leapfrog steps)
    gradients_text: str                # the time estimate's bound, in words
    buffers_per_chain: float
    shared_buffers: float
    program_bytes: int
    device_programs: dict = field(default_factory=dict)
    white_noise_programs: dict = field(default_factory=dict)   # the same for a white-noise latent
    may_unroll: bool = False           # small runs unroll its leapfrog loop (core.run.engine_limits.unrolls)
    adjusted: bool = True              # a Metropolis step makes it exact (False: a bias falling with the step)
    #: the mean integration steps a step (P(k) fixed, P(k) sampled) where it is tuned, not fixed
    #: (MAMS: 2 gradients each); None: ``fixed_gradients`` or L
    trajectory_steps: tuple[float, float] | None = None

    def gradients_per_step(self, num_leapfrog_steps: int, hyper_sampled: bool = False,
                           interweave: bool = False) -> int:
        """Gradient evaluations of one step (the least where a step's trajectory varies, the
        mean where its mean is tuned); ``hyper_sampled``: P(k) hyperparameters are sampled with
        the field; ``interweave``: ``sampler.interweave``, whose move costs one more there."""
        move = int(bool(hyper_sampled and interweave))
        if self.trajectory_steps is not None:
            return round(2 * self.trajectory_steps[bool(hyper_sampled)]) + move
        return (int(num_leapfrog_steps) if self.fixed_gradients is None else self.fixed_gradients) + move


_LOOPED_SHARED = 19        # looped HMC and NUTS: grid-sized buffers once per run
#: looped HMC's memory (335 MiB: refitted 2026-12 on 64^3 x 2 and 96^3 x 1, docs/benchmarks.md);
#: the jittered HMC's too (its loop is one leapfrog step an iteration: not measured apart)
_LOOPED_HMC_MEMORY = dict(buffers_per_chain=0, shared_buffers=_LOOPED_SHARED, program_bytes=335 * _MiB,
                          device_programs={False: ((13.0, 10.6, True),)},
                          white_noise_programs={("identity", False): ((10.8, 10.9, True),),
                                                ("diagonal", False): ((14.8, 10.9, True),)})
#: MCLMC's and MAMS's buffers and program (fitted 2026-12-03 on 64^3 and 128^3, 1 and 2 chains,
#: within 4 %)
_MICROCANONICAL_MEMORY = dict(buffers_per_chain=6, shared_buffers=35, program_bytes=165 * _MiB)

SAMPLERS: dict[str, SamplerInfo] = {s.name: s for s in (
    SamplerInfo(
        "hmc", "HMC (fixed leapfrog steps)", "core.engine.samplers.hmc:Hmc",
        microcanonical=False, leapfrog_steps=True, target_accept=True, fixed_gradients=None,
        gradients_text="≥",
        **_LOOPED_HMC_MEMORY, may_unroll=True),
    SamplerInfo(
        "hmc_jittered", "HMC, jittered trajectory (n in 1 .. 2L-1 leapfrog steps)",
        "core.engine.samplers.hmc_jittered:HmcJittered",
        microcanonical=False, leapfrog_steps=True, target_accept=True, fixed_gradients=None,
        gradients_text="≈ (jittered HMC: L gradients a step on average)",
        **_LOOPED_HMC_MEMORY),
    SamplerInfo(
        "nuts", "NUTS (no-U-turn)", "core.engine.samplers.nuts:Nuts",
        microcanonical=False, leapfrog_steps=False, target_accept=True, fixed_gradients=1,
        gradients_text="≥ (NUTS: at least one gradient a step)",
        # core.engine.nuts, max tree depth 10 (TFP's NoUTurnSampler needed 312 buffers a chain
        # and a 367 MiB program)
        buffers_per_chain=36, shared_buffers=_LOOPED_SHARED, program_bytes=265 * _MiB,
        device_programs={False: ((41.5, 8.1, True),)},
        white_noise_programs={("identity", False): ((39.3, 8.4, True),),
                              ("diagonal", False): ((43.3, 8.4, True),)}),
    SamplerInfo(
        "mclmc", "MCLMC (microcanonical Langevin, unadjusted)", "core.engine.samplers.mclmc:Mclmc",
        microcanonical=True, leapfrog_steps=False, target_accept=False, fixed_gradients=2, adjusted=False,
        gradients_text="≥ (MCLMC: two gradients a step)",
        **_MICROCANONICAL_MEMORY,
        device_programs={False: ((17.8, 16.8, True), (13.7, 5.0, False)),
                         True: ((13.8, 8.8, True), (21.7, 5.0, False))},
        white_noise_programs={("identity", False): ((21.0, 15.7, True),),
                              ("identity", True): ((15.0, 9.7, True), (22.1, 3.7, False)),
                              ("diagonal", True): ((15.0, 9.7, True), (18.1, 3.7, False))}),
    SamplerInfo(
        "mams", "MAMS (microcanonical, Metropolis-adjusted)", "core.engine.samplers.mams:Mams",
        microcanonical=True, leapfrog_steps=False, target_accept=True, fixed_gradients=2,
        gradients_text=f"≥ (MAMS: {2 * MAMS_STEPS_PER_L:.0f} gradients a step on average, "
                       f"{2 * MAMS_HYPER_STEPS_PER_L:.0f} with P(k) sampled)",
        trajectory_steps=(MAMS_STEPS_PER_L, MAMS_HYPER_STEPS_PER_L),
        **_MICROCANONICAL_MEMORY,
        device_programs={False: ((25.5, 4.1, True), (25.5, 5.0, False)),
                         True: ((17.5, 4.1, True), (25.5, 5.0, False))},
        white_noise_programs={("identity", False): ((23.1, 8.8, True),),
                              ("identity", True): ((15.1, 8.8, True), (23.1, 5.7, False)),
                              ("diagonal", True): ((15.1, 8.8, True), (27.1, 5.7, False))}),
)}

#: the config's choices of sampler.algorithm, in the panel's order
ALGORITHMS = tuple(SAMPLERS)


def sampler_info(algorithm: str) -> SamplerInfo:
    """The registry entry of ``algorithm`` (a ValueError naming the choices for another)."""
    try:
        return SAMPLERS[algorithm]
    except KeyError:
        raise ValueError(f"sampler.algorithm: {algorithm!r} is not one of "
                         f"{', '.join(repr(a) for a in ALGORITHMS)}") from None
