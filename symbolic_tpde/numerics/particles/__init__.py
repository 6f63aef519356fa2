"""Particle systems: attention fields (blocked and fused kernels), simulation, sphere models, energy."""
