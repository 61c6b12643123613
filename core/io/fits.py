"""FITS image HDUs (astropy.io.fits, imported when a file is first read).

numpy axis i is FITS axis 3 - i (NAXIS1 varies fastest); box size |CDELTn| * NAXISn in
CUNITn. See ``FitsLoader``.
"""

from __future__ import annotations

import collections
import contextlib
import math
import re
from typing import Any, NamedTuple

import numpy as np

from core.io.arrays import (
    MMAP_THRESHOLD_BYTES,
    ArrayInfo,
    LoadedArray,
    LoadError,
    _box_size,
    _check_file,
    _listing,
    _missing,
    _nbytes,
    _optional_import,
    _pick_key,
    _reading,
)

__all__ = ['FitsLoader']

# --------------------------------------------------------------------------- FITS


def _fits(path: str):
    return _optional_import(path, "astropy.io.fits", "astropy", "FITS")


def _fits_errors(fits) -> tuple:
    """astropy's own errors for damaged files (found by fuzzing): header cards it cannot
    parse, the tile decompressor's errors, and AttributeError from a header too broken
    for astropy to build an HDU object of."""
    errors = [fits.VerifyError, AttributeError]
    try:
        from astropy.io.fits.hdu.compressed._compression import CfitsioException
        errors.append(CfitsioException)
    except ImportError:    # pragma: no cover - astropy reorganised
        pass
    return tuple(errors)


# BITPIX -> the dtype of the stored values (big-endian on disk), and the dtype astropy
# gives after BSCALE / BZERO (unsigned integers stored with the conventional offsets
# come back unsigned; other scaling gives floats).
_BITPIX = {8: np.dtype(np.uint8), 16: np.dtype(np.int16), 32: np.dtype(np.int32),
           64: np.dtype(np.int64), -32: np.dtype(np.float32), -64: np.dtype(np.float64)}
_UNSIGNED_ZERO = {8: (-128, np.dtype(np.int8)), 16: (2**15, np.dtype(np.uint16)),
                  32: (2**31, np.dtype(np.uint32)), 64: (2**63, np.dtype(np.uint64))}
# Header cards that describe the file's structure, not the data (not copied to attrs).
_FITS_STRUCTURAL = re.compile(r"^(SIMPLE|XTENSION|BITPIX|NAXIS\d*|EXTEND|PCOUNT|GCOUNT|"
                              r"GROUPS|END|COMMENT|HISTORY|CHECKSUM|DATASUM|Z.*|TFIELDS|"
                              r"T(TYPE|FORM|UNIT|DIM|NULL|SCAL|ZERO|DISP)\d+|)$")
_FITS_ATTRS_MAX = 64


_FITS_BLOCK = 2880
_FITS_AXES_KEYWORDS = ("NAXIS", "ZNAXIS")


def _fits_int(card: bytes) -> int | None:
    """The integer value of a fixed-format header card, or None."""
    if card[8:10] != b"= ":
        return None
    text = card[10:].split(b"/", 1)[0].strip()
    try:
        return int(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None


def _fits_prescan(path: str, size: int) -> None:
    """Check the axis counts of every header before astropy reads the file.

    astropy loops forever on a header with NAXIS (or ZNAXIS) = 10**12 (it builds a list
    of that many axes; found by fuzzing), so each header is read here first: its
    80-byte cards up to END, then the data are skipped as the standard says
    (|BITPIX| / 8 * GCOUNT * (PCOUNT + NAXIS1 * ... * NAXISn)). A header this scan
    cannot follow ends it; astropy then reports what is wrong. Data the file is too
    short to hold are refused here, with what the header promises (astropy says only
    "Empty or corrupt FITS file" when the promise is far beyond the file's end).
    """
    offset = 0
    index = -1
    with open(path, "rb") as fh:
        while offset + _FITS_BLOCK <= size:
            index += 1
            fh.seek(offset)
            values: dict[str, int | None] = {}
            ended = False
            while not ended:
                block = fh.read(_FITS_BLOCK)
                if len(block) < _FITS_BLOCK:
                    return
                offset += _FITS_BLOCK
                for start in range(0, _FITS_BLOCK, 80):
                    card = block[start:start + 80]
                    keyword = card[:8].rstrip().decode("ascii", "replace")
                    if keyword == "END":
                        ended = True
                        break
                    if keyword in _FITS_AXES_KEYWORDS:
                        n = _fits_int(card)
                        if n is not None and not 0 <= n <= 999:
                            raise LoadError(f"{path}: header card {keyword} = {n}: FITS "
                                            "allows 0 to 999 axes")
                    if keyword not in values and (keyword.startswith("NAXIS") or keyword in
                                                  ("BITPIX", "PCOUNT", "GCOUNT")):
                        values[keyword] = _fits_int(card)
            naxis, bitpix = values.get("NAXIS"), values.get("BITPIX")
            if naxis is None or bitpix is None:
                return
            dims = [values.get(f"NAXIS{i}") for i in range(1, naxis + 1)]
            if any(d is None or d < 0 for d in dims):
                return
            if dims and dims[0] == 0 and naxis > 1:      # random groups: NAXIS1 = 0
                dims = dims[1:]
            n = math.prod(dims) if dims else 0
            pcount, gcount = values.get("PCOUNT") or 0, values.get("GCOUNT") or 1
            nbytes = abs(bitpix) // 8 * gcount * (pcount + n)
            if nbytes < 0:
                return
            if offset + nbytes > size:
                raise LoadError(_promise(path, index, values, naxis, nbytes, offset, size))
            offset += -(-nbytes // _FITS_BLOCK) * _FITS_BLOCK


def _promise(path: str, index: int, values: dict, naxis: int, nbytes: int, start: int,
             size: int) -> str:
    """The message for an HDU whose header promises more data than the file holds."""
    cards = [f"NAXIS{i} = {values[f'NAXIS{i}']}" for i in range(1, naxis + 1)]
    extra = [f"{k} = {values[k]}" for k, default in (("PCOUNT", 0), ("GCOUNT", 1))
             if values.get(k) not in (None, default)]
    shape = "" if extra or not naxis else \
        f", shape {tuple(values[f'NAXIS{i}'] for i in range(naxis, 0, -1))}"
    return (f"{path}: HDU {index}: truncated: the header promises {', '.join(cards + extra)} "
            f"with BITPIX {values['BITPIX']}{shape}: {nbytes} bytes of data, but only "
            f"{max(size - start, 0)} bytes follow (the file has {size} bytes, the data "
            f"start at byte {start})")


class _FitsImage(NamedTuple):
    """What the header of one image HDU says (nothing read from the data)."""

    index: int
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype          # as loaded (after BSCALE / BZERO), native byte order
    scaled: bool             # BSCALE / BZERO / BLANK present: astropy must scale in memory
    compressed: bool


class FitsLoader:
    """FITS image HDUs (astropy.io.fits): the primary HDU or an image extension.

    Arrays are named "PRIMARY" (HDU 0) and by EXTNAME for extensions ("SCI"; "SCI,2"
    for the second of two with that name; the HDU's index "3" where it has no name);
    a key may also be the index as text ("0", "1"). Only image HDUs that hold data
    are listed; a key naming a table is refused with the reason. ``key=None``, and the
    config's default key "data" when no HDU is named DATA, pick the primary image, or
    the only image extension when the primary HDU holds no data.

    Axis order. FITS axis 1 (NAXIS1) varies fastest, so numpy's shape is (NAXIS3,
    NAXIS2, NAXIS1): numpy axis i is FITS axis 3 - i. The box size is
    (|CDELT3| * NAXIS3, |CDELT2| * NAXIS2, |CDELT1| * NAXIS1), in CUNITn when all three
    axes state the same unit; with CDELTn missing on an axis, or CUNITn differing
    between axes (e.g. deg, deg, Hz), the file states no box (``attrs["box_note"]``
    says why).

    BSCALE / BZERO / BLANK are applied by astropy (such arrays are read into memory);
    unscaled images above ``mmap_threshold`` bytes come back memory-mapped read-only,
    in the file's big-endian byte order. Nothing in a FITS file is ever executed.
    """

    extensions = (".fits", ".fit", ".fts")
    description = "FITS file"

    def __init__(self, mmap_threshold: int = MMAP_THRESHOLD_BYTES):
        self.mmap_threshold = mmap_threshold

    @staticmethod
    @contextlib.contextmanager
    def _open(fits, path: str, memmap: bool):
        import warnings

        with warnings.catch_warnings():
            # damaged headers make astropy warn (and go on); the errors say what matters
            warnings.simplefilter("ignore")
            hdul = fits.open(path, mode="readonly", memmap=memmap, lazy_load_hdus=True,
                             cache=False, use_fsspec=False)
            try:
                yield hdul
            finally:
                hdul.close()

    @staticmethod
    def _image(fits, hdu, index: int, file_size: int, where: str) -> _FitsImage | None:
        """The image HDU's description, None for an image HDU without data."""
        header = hdu.header
        naxis = header.get("NAXIS", 0)
        if not isinstance(naxis, int) or isinstance(naxis, bool) or not 0 <= naxis <= 999:
            raise LoadError(f"{where}: NAXIS = {naxis!r} is not an axis count (0 to 999)")
        if naxis == 0:
            return None
        dims = []
        for i in range(naxis, 0, -1):       # numpy order: the last FITS axis first
            n = header.get(f"NAXIS{i}")
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise LoadError(f"{where}: NAXIS{i} = {n!r} is not a length")
            dims.append(n)
        if 0 in dims:
            return None
        bitpix = header.get("BITPIX")
        if bitpix not in _BITPIX:
            raise LoadError(f"{where}: BITPIX = {bitpix!r}; FITS allows 8, 16, 32, 64, -32, "
                            "-64")
        dtype = _BITPIX[bitpix]
        compressed = isinstance(hdu, fits.CompImageHDU)
        bscale, bzero = header.get("BSCALE", 1), header.get("BZERO", 0)
        for card, value in (("BSCALE", bscale), ("BZERO", bzero)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or \
                    not math.isfinite(value):
                raise LoadError(f"{where}: {card} = {value!r} is not a finite number")
        scaled = any(card in header for card in ("BSCALE", "BZERO", "BLANK"))
        if bscale != 1 or bzero != 0:
            offset, unsigned = _UNSIGNED_ZERO.get(bitpix, (None, None))
            if bscale == 1 and bzero == offset:
                dtype = unsigned
            else:
                dtype = np.dtype(np.float32) if abs(bitpix) <= 16 or bitpix == -32 \
                    else np.dtype(np.float64)
        if not compressed:          # (a compressed image's size is its table's)
            start = hdu.fileinfo()["datLoc"]
            nbytes = math.prod(dims) * abs(bitpix) // 8
            if start + nbytes > file_size:
                raise LoadError(f"{where}: truncated: the header promises shape "
                                f"{tuple(dims)} with BITPIX {bitpix} ({nbytes} bytes of "
                                f"data) but only {max(file_size - start, 0)} bytes follow")
        return _FitsImage(index, "", tuple(dims), dtype, scaled, compressed)

    def _scan(self, fits, hdul, path: str, size: int):
        """([_FitsImage] of the image HDUs with data, {name: reason} of other HDUs)."""
        images, others, names = [], {}, []
        for index, hdu in enumerate(hdul):
            where = f"{path}: HDU {index}"
            name = "PRIMARY" if index == 0 else (str(hdu.name or "").strip() or str(index))
            if index and name != str(index):
                where += f" ({name})"
            names.append((index, name, getattr(hdu, "ver", 1)))
            if not isinstance(hdu, (fits.PrimaryHDU, fits.ImageHDU, fits.CompImageHDU)) \
                    or isinstance(hdu, fits.GroupsHDU):
                others[index] = (f"is a {type(hdu).__name__} (a table, random groups or "
                                 "an unrecognised extension), not an image")
                continue
            info = self._image(fits, hdu, index, size, where)
            if info is None:
                others[index] = "holds no data (NAXIS = 0 or an axis of length 0)"
                continue
            images.append(info)
        counts = collections.Counter(n.upper() for _, n, _ in names)
        labels = {index: (f"{name},{ver}" if counts[name.upper()] > 1 else name)
                  for index, name, ver in names}
        counts = collections.Counter(n.upper() for n in labels.values())
        labels = {index: (label if counts[label.upper()] == 1 else str(index))
                  for index, label in labels.items()}     # still ambiguous: the index
        images = [i._replace(name=labels[i.index]) for i in images]
        others = {labels[i]: reason for i, reason in others.items()}
        return images, others, labels

    def list_arrays(self, path) -> list[ArrayInfo]:
        path, size = _check_file(path)
        fits = _fits(path)
        with _reading(path, "FITS", self.extensions, _fits_errors(fits)):
            _fits_prescan(path, size)
            with self._open(fits, path, True) as hdul:
                images, _, _ = self._scan(fits, hdul, path, size)
        return [ArrayInfo(i.name, i.shape, i.dtype, _nbytes(i.shape, i.dtype))
                for i in images]

    @staticmethod
    def _find(key, images, others, labels, path) -> _FitsImage:
        infos = [ArrayInfo(i.name, i.shape, i.dtype, _nbytes(i.shape, i.dtype))
                 for i in images]
        if key is None or (key == "data" and "DATA" not in
                           {n.upper() for n in labels.values()}):
            if images and images[0].index == 0:
                return images[0]          # the primary image, as FITS readers do
            key = _pick_key(path, None, infos, "image HDU")
        elif not isinstance(key, str) or not key.strip():
            raise LoadError(f"{path}: key {key!r} must name an HDU (available images: "
                            f"{_listing(infos)})")
        wanted = key.strip().upper()
        for index, label in labels.items():
            if wanted in (label.upper(), str(index)):
                for image in images:
                    if image.index == index:
                        return image
                raise LoadError(f"{path}: HDU {label!r} {others[label]}; images: "
                                f"{_listing(infos)}")
        raise _missing(path, key, infos, "image HDU")

    def info(self, path, key=None) -> ArrayInfo:
        """The ArrayInfo of the image ``load(path, key)`` would read (headers only)."""
        path, size = _check_file(path)
        fits = _fits(path)
        with _reading(path, "FITS", self.extensions, _fits_errors(fits)):
            _fits_prescan(path, size)
            with self._open(fits, path, True) as hdul:
                images, others, labels = self._scan(fits, hdul, path, size)
                i = self._find(key, images, others, labels, path)
        return ArrayInfo(i.name, i.shape, i.dtype, _nbytes(i.shape, i.dtype))

    def load(self, path, key=None, *, attributes: bool = True) -> LoadedArray:
        path, size = _check_file(path)
        fits = _fits(path)
        with _reading(path, "FITS", self.extensions, _fits_errors(fits)):
            _fits_prescan(path, size)
            with self._open(fits, path, True) as hdul:
                images, others, labels = self._scan(fits, hdul, path, size)
                image = self._find(key, images, others, labels, path)
                header = hdul[image.index].header.copy()
                mapped = not (image.scaled or image.compressed) and \
                    _nbytes(image.shape, image.dtype) > self.mmap_threshold
                if mapped:
                    array = hdul[image.index].data     # a view of the memory map
                    array.flags.writeable = False
            if not mapped:
                with self._open(fits, path, False) as hdul:
                    data = hdul[image.index].data
                    if data is None:
                        raise LoadError(f"{path}: HDU {image.name!r} holds no data")
                    # native byte order; no second copy when astropy scaled it already
                    array = data.astype(data.dtype.newbyteorder("="), copy=False)
            if array.dtype.hasobject or array.shape != image.shape:
                raise LoadError(f"{path}: HDU {image.name!r}: read shape {array.shape} "
                                f"{array.dtype}, the header says {image.shape}")
            if not attributes:
                return LoadedArray(array, image.name, path)
            box_size, unit, attrs = self._box(header, image, f"{path}: HDU {image.name!r}")
        return LoadedArray(array, image.name, path, box_size, unit, attrs)

    @staticmethod
    def _box(header, image: _FitsImage, where: str):
        """(box_size, unit, attrs) from the header: see the class docstring."""
        attrs: dict[str, Any] = {}
        for card in header.cards:
            try:
                name, value = card.keyword, card.value
            except Exception:     # noqa: BLE001 - a card astropy cannot parse is skipped
                continue          # (metadata is a courtesy)
            if len(attrs) >= _FITS_ATTRS_MAX or _FITS_STRUCTURAL.match(name or ""):
                continue
            if isinstance(value, (bool, int, float, str)):
                attrs[name] = value
        if len(image.shape) != 3:
            return None, None, attrs
        lengths, units = [], []
        for axis in range(3):                 # numpy axis -> FITS axis 3 - axis
            fits_axis = 3 - axis
            cdelt = header.get(f"CDELT{fits_axis}")
            if cdelt is None:
                attrs["box_note"] = f"no CDELT{fits_axis}: the file states no box size"
                return None, None, attrs
            if not isinstance(cdelt, (int, float)) or isinstance(cdelt, bool) or \
                    not math.isfinite(cdelt) or cdelt == 0:
                raise LoadError(f"{where}: CDELT{fits_axis} = {cdelt!r}; a cell size must "
                                "be a finite, non-zero number")
            lengths.append(abs(float(cdelt)) * image.shape[axis])
            u = header.get(f"CUNIT{fits_axis}")
            units.append(u.strip() if isinstance(u, str) else None)
        if len(set(units)) > 1:
            attrs["box_note"] = (f"CUNIT3, CUNIT2, CUNIT1 = {units} differ: the axes are not "
                                 "all lengths in one unit, so no box size is taken")
            return None, None, attrs
        box = _box_size(np.array(lengths), f"{where}: CDELTn * NAXISn")
        return box, units[0] or None, attrs


