"""Reading data files: one module per file format, the run inputs, series and P(k) tables.

The loaders form a registry keyed by file extension (``core.io.formats``), shared by the CLI and the GUI.

numpy, h5py and astropy only (h5py and astropy imported when an HDF5 or FITS file is
first read): the GUI's Data panel imports this module, so it never imports TensorFlow,
Qt or scipy at import time.

Gridded arrays (``LOADERS``, one loader object per extension)::

    .npy          one array; ``key`` is ignored. Arrays whose data exceed
                  ``MMAP_THRESHOLD_BYTES`` (64 MiB) come back memory-mapped read-only.
    .npz          a zip of named .npy members; ``key`` picks one (listing reads only
                  the members' headers). Other 0-d members become ``attrs``, and
                  members named ``box_size`` / ``unit`` give the box (the format of
                  ``core.field.synthetic.save_dataset``).
    .h5 / .hdf5   datasets at paths such as "group/field"; ``box_size`` (one number or
                  three) and ``unit`` are read from the dataset's attributes, else the
                  file root's. Only the file's own bytes are read: external storage,
                  virtual datasets and external links are refused, named.
    .fits / .fit / .fts   image HDUs (astropy.io.fits): "PRIMARY", an EXTNAME or an
                  index; box size |CDELTn| * NAXISn in CUNITn. numpy axis i is FITS
                  axis 3 - i (NAXIS1 varies fastest). See ``FitsLoader``.

Each loader has ``list_arrays(path) -> [ArrayInfo]`` and ``load(path, key=None, *,
attributes=True) -> LoadedArray``; ``key=None`` picks the only array and is an error
when there are several; ``attributes=False`` skips the box size, unit and metadata
(HDF5 string attributes cost a child process, see ``Hdf5Loader``). Nothing is ever
unpickled: an array of Python objects (dtype object) is refused from its header,
before any of its bytes are read.

1-D series (``Series``, ``load_series``, ``save_series_csv``: .csv .txt .dat, columns
t, y[, f]; ``core.io.series`` is the one reader of the format) and P(k) tables
(``load_power_table``, which reads the file and builds
``core.field.power_spectrum.TabulatedPower``; ``load_prior_table(config)`` for the table
a config names).

Run inputs. ``load_field_inputs(config)`` returns the validated arrays of a field
run (it does not build ``Observations``; the engine does). References in
``data.mask`` and ``data.noise_map`` follow one rule:

    ends in .npy/.npz/.h5/.hdf5/  a file (relative to the config file), holding one
      .fits/.fit/.fts             array, e.g. "mask.npy"
    FILE:KEY, FILE as above        the array KEY in that file, e.g. "other.npz:mask",
                                  "maps.h5:survey/mask", "cube.fits:MASK"
    anything else                  an array of that name in the data file, e.g. "mask"

Errors. Every problem with a file raises ``LoadError`` (a ``ValueError``) whose message
starts with the file's path and names the array and the offending value or what would
be accepted; no other exception escapes a loader for a bad file (the GUI shows the
message, never a traceback). A FIFO or device is never opened (only regular files are
read), and ``load_field_inputs`` checks every array's shape from its header before
reading any, so a small file that unpacks to gigabytes is refused first.
"""

from core.io.arrays import MMAP_THRESHOLD_BYTES, ArrayInfo, ArrayStats, LoadedArray, LoadError
from core.io.field_inputs import FieldInputs, exact_slab, is_file_reference, load_field_inputs, load_observations
from core.io.fits import FitsLoader
from core.io.formats import LOADERS, array_info, inspect_array, loader_for
from core.io.hdf5 import Hdf5Loader
from core.io.npy import NpyLoader
from core.io.npz import NpzLoader
from core.io.power_table import load_power_table, load_prior_table
from core.io.series import (
    SERIES_EXTENSIONS,
    Series,
    load_named_arrays,
    load_series,
    load_series_inputs,
    save_series_csv,
)

__all__ = [
    "MMAP_THRESHOLD_BYTES",
    "ArrayInfo",
    "ArrayStats",
    "LoadedArray",
    "LoadError",
    "FieldInputs",
    "is_file_reference",
    "load_field_inputs",
    "exact_slab",
    "load_observations",
    "FitsLoader",
    "LOADERS",
    "array_info",
    "inspect_array",
    "loader_for",
    "Hdf5Loader",
    "NpyLoader",
    "NpzLoader",
    "load_power_table",
    "load_prior_table",
    "SERIES_EXTENSIONS",
    "Series",
    "load_named_arrays",
    "load_series",
    "load_series_inputs",
    "save_series_csv",
]
