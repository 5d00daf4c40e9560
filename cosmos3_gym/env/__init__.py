"""The Gymnasium surface: presets (and their TOML files), seeding, reset options, the autoreset
protocol, the vector env and its single-env view, spaces, infos, rewards, SB3 and Ray adapters."""
