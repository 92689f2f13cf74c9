"""sebulba: Podracer-Sebulba distributed reinforcement learning on JAX."""
