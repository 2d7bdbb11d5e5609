"""A probed child's final publish, left behind as the probe leaves it when its process exits: run
``python -c CLOSED_FINAL_WRITER PPID`` and it publishes a segment naming PPID its parent, closes it
keeping that last publish, prints its pid and start ticks, and exits."""

CLOSED_FINAL_WRITER = """
import os, sys
import probe_wire as segment
w = segment.SegmentWriter()
payload = segment.empty_payload(os.getpid(), w.start_ticks)
payload["ppid"] = int(sys.argv[1])
w.publish(payload)
w.close(keep_final=True)
print(os.getpid(), w.start_ticks, flush=True)
"""
