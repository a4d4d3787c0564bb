"""Jobs: what a command runs. Each job's options are one spec dataclass (:mod:`~headstats.specs`)
that the CLI, analysis TOML files and Python calls all build."""
