"""Latency of `.tflite` models: measured on this host (host.py, peak.py), measured on a phone over adb (adb.py),
estimated for Pixel-class phones from the graph and published hardware figures (estimate.py, profiles/), and the
report that gathers them (report.py). The programs are `mobilekd latency`, `mobilekd host-bench` and
`mobilekd adb` (mobilekd/recipes/)."""
