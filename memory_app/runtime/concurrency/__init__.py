"""How the runtime runs one turn whoever calls it: the concurrency helpers, apart from the
turn's own steps. None of them knows a run, a graph or a model.

- `loop` — the process's one event loop (a daemon thread) every turn runs on, and the adapters
  sync and async callers reach it through (`run_sync`, `on_process_loop`, `on_database`;
  `Job`, a coroutine running there; an `undo` for a result its interrupted caller will not
  take).
- `caller_thread` — `CallerThread`: a sync caller's thread serving its turn's database steps
  (and keeping an interruption out of the loop).
- `relay` — an event stream made on that loop, read from another loop (`relay`) or from sync
  code (`iterate_sync`).
- `settling` — `opened`, `to_the_end` and `settled`: an open, close or cancel awaited so that
  nothing stops it halfway.
"""
