"""Small-resolution datasets read from the files users hold, without running any code from them.

- :mod:`ccc.datasets.plain_pickle`: pickles of plain values and numpy arrays, read by interpreting
  their opcodes (no global is ever imported or called; the work is bounded);
- :mod:`ccc.datasets.cifar`: CIFAR-10 and CIFAR-100 in torchvision's on-disk format
  (``cifar-10-batches-py/``, ``cifar-100-python/``) as uint8 image arrays, labels and class names;
- :mod:`ccc.datasets.tiny_imagenet`: the index of a ``tiny-imagenet-200/`` folder (train and val) as an
  :class:`~ccc.stream.sources.ImageIndex`, its layout checked;
- :mod:`ccc.datasets.folders`: a split of either (``--dataset NAME[/SPLIT]:PATH``) written once into the
  cache as a folder of class sub-folders, the image folder every command reads.

The readers are pure; only :func:`ccc.datasets.folders.dataset_image_folder` writes (into the cache).
"""
