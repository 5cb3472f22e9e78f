"""A capture subscriber (what ``xrmq capture`` does): a SUB socket on the broker's capture
endpoint, subscribed to everything, with a small receive queue.

argv: BUS (an ipc bus). Prints "ready" once the first frame arrived through the capture
socket (its connection is live), then reads whatever comes; the test stops it (SIGSTOP)
to make it a capture subscriber that stops reading.
"""

import sys

import zmq

bus = sys.argv[1]
context = zmq.Context()
sub = context.socket(zmq.SUB)
sub.setsockopt(zmq.RCVHWM, 16)
sub.setsockopt(zmq.RCVBUF, 65536)
sub.setsockopt(zmq.SUBSCRIBE, b"")
sub.connect(f"{bus}.capture")
sub.recv_multipart()
print("ready", flush=True)
while True:
    sub.recv_multipart()
