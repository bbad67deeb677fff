"""The app: the only layer that wires everything together. The daemon (:mod:`.daemon`) builds
the engine, the consumers and the web face from a config, reloads it (loaded in a child
process, :mod:`.configload`), owns the data dir (:mod:`.datadir`) and stops on signals
(:mod:`.lifecycle`)."""
