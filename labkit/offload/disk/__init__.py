"""Real bytes on a real disk: raw bandwidth of the disk, and a store of named tensors as files.

Why this package exists: ZeRO-Infinity (Rajbhandari et al., SC 2021) keeps model states on
NVMe and claims that the offload path can use most of the drive's sequential bandwidth. A
claim like that is only worth checking against the *same* disk measured in the *same* run,
and with the page cache out of the way: buffered writes and reads on Linux measure DRAM,
not the SSD (see the lab's field notes: O_DIRECT write ~1.5 GiB/s, read ~0.9 GiB/s here).

* ``io``: aligned reads and writes, ``O_DIRECT`` detection, dropping the page cache where the
  OS can (``posix_fadvise`` is Linux-only; macOS has none), and OS errors as ``LabkitError``;
* ``bandwidth``: :func:`measure_disk`, the raw sequential bandwidth of one disk;
* ``buffers``: page-aligned staging buffers and the I/O counters;
* ``store``: :class:`DiskStore`, named tensors as raw files, checksummed by default.
"""
