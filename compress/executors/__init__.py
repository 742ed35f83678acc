"""Where work runs, behind two small interfaces (registries, like the stages):

  places (places.py, fleet.py, dispatch.py)
      where a measurement runs: `here` (this Python), another local Python, or a device
      over SSH; a target has one place or a fleet of boards. The benchmark stage talks
      only to places: stage files, measure -> runtimes.result.Measurement, read, close.
  trial executors (trials.py, ray_trials.py, ray_task.py)
      where a search's trials compress: local (here, one after another) or ray (Ray
      tasks on a cluster; measured here, one at a time per device).
"""
