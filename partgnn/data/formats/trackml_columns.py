"""A TrackML CSV table (``hits``, ``truth``, ``particles``; gzipped or not) read column by column
into the dtypes partgnn keeps (:mod:`partgnn.data.formats.trackml_reader` reads an event's
tables): a column missing, a value that is not a number, a whole number that is not whole or
does not fit, refused in one line naming the file, the column and the row."""

from __future__ import annotations

import warnings
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from partgnn.data.event import HIT_COLUMNS, PARTICLE_COLUMNS, TRUTH_COLUMNS
from partgnn.data.formats.cluster_shapes import CELL_COLUMNS
from partgnn.errors import InputError, first_line

#: The table of an event's cells (``event000000001-cells.csv``), read where it is there.
CELLS_TABLE = "cells"

#: Columns a particles file may lack; they are filled with this value.
OPTIONAL_COLUMNS: dict[str, dict[str, int]] = {"particles": {"particle_type": 0}}
#: The columns partgnn keeps of each table, with their dtypes.
TABLE_COLUMNS = {"hits": HIT_COLUMNS, "truth": TRUTH_COLUMNS, "particles": PARTICLE_COLUMNS}

# What pandas (and the gzip / zlib layers under it) raise for an unreadable file. ParserError is a
# ValueError; a bare ValueError also comes from odd encodings and compression set-ups.
_READ_ERRORS = (
    pd.errors.ParserError,
    pd.errors.EmptyDataError,
    UnicodeDecodeError,
    ValueError,
    OSError,
    EOFError,
    zlib.error,
)


def read_table(path: Path, table: str) -> pd.DataFrame:
    """Reads the TrackML columns of one CSV file, converted and checked column by column."""
    return pd.DataFrame(read_columns(path, table))


def read_columns(path: Path, table: str) -> dict[str, np.ndarray]:
    """:func:`read_table`'s columns, as arrays."""
    columns = CELL_COLUMNS if table == CELLS_TABLE else TABLE_COLUMNS[table]
    try:
        # dtypes are inferred rather than imposed: a clean file parses to int64/float64 in one go
        # (int64 keeps ~1e18 particle ids exact), and a bad value then becomes a column we can
        # diagnose by name and row instead of an anonymous pandas conversion error. All columns
        # are parsed (no usecols), because usecols makes pandas accept rows with extra fields.
        with warnings.catch_warnings():
            # index_col=False stops pandas from silently turning the first column into the index
            # when every row is longer than the header; it warns instead, which we make an error.
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(path, index_col=False)
    except pd.errors.EmptyDataError:
        raise InputError(f"{path}: empty file, not a CSV table") from None
    except pd.errors.ParserWarning:
        raise InputError(f"{path}: not a readable CSV file (rows longer than the header)") from None
    except _READ_ERRORS as err:
        raise InputError(f"{path}: not a readable CSV file ({first_line(err)})") from None
    optional = OPTIONAL_COLUMNS.get(table, {})
    out = {}
    for name, dtype in columns.items():
        if name in frame.columns:
            out[name] = _convert_column(frame[name], dtype, path, name)
        elif name in optional:
            out[name] = np.full(len(frame), optional[name], dtype=dtype)
        else:
            raise InputError(f"{path}: missing column {name!r}")
    return out


def _convert_column(series: pd.Series, dtype: np.dtype, path: Path, name: str) -> np.ndarray:
    """Casts one parsed column to ``dtype``, rejecting text, NaN, inf, fractions and overflow."""
    if pd.api.types.is_bool_dtype(series) or not (
        pd.api.types.is_integer_dtype(series) or pd.api.types.is_float_dtype(series)
    ):
        if dtype.kind == "i":
            return _integers_from_objects(series, dtype, path, name)
        numeric = pd.to_numeric(series, errors="coerce")
        bad = np.flatnonzero((numeric.isna() & series.notna()).to_numpy())
        if len(bad) or pd.api.types.is_bool_dtype(series):
            row = int(bad[0]) if len(bad) else 0
            raise InputError(
                f"{path}: column {name!r} is not numeric "
                f"(value {_short(series.iloc[row])} in data row {row + 1})"
            )
        series = numeric
    values = series.to_numpy()
    if values.dtype.kind == "f":
        nonfinite = np.flatnonzero(~np.isfinite(values))
        if len(nonfinite):
            row = int(nonfinite[0])
            what = "an empty or NaN" if np.isnan(values[row]) else "an infinite"
            raise InputError(f"{path}: column {name!r} has {what} value in data row {row + 1}")
    if dtype.kind == "f":
        limit = np.finfo(dtype).max
        too_big = np.flatnonzero(np.abs(values) > limit)
        if len(too_big):
            row = int(too_big[0])
            raise InputError(
                f"{path}: column {name!r} value {values[row]} in data row {row + 1} "
                f"is out of range ({dtype} expected)"
            )
        return values.astype(dtype, copy=False)
    if values.dtype.kind == "f" and (
        (values != np.round(values)).any() or (np.abs(values) > 2.0**53).any()
    ):
        # One fraction turns the whole column into float64, where large ids are no longer
        # exact: parse the column's text again to keep them and to name the real culprit.
        return _integers_from_objects(_text_column(path, name), dtype, path, name)
    info = np.iinfo(dtype)
    # A value beyond int64 makes pandas parse the column as uint64, hence the separate test.
    if values.dtype.kind == "u":
        out_of_range = values > info.max
    else:
        out_of_range = (values < info.min) | (values > info.max)
    if out_of_range.any():
        row = int(np.flatnonzero(out_of_range)[0])
        raise InputError(
            f"{path}: column {name!r} value {values[row]} in data row {row + 1} "
            f"is out of range ({dtype} expected)"
        )
    return values.astype(dtype, copy=False)


def _text_column(path: Path, name: str) -> pd.Series:
    """Reads one column of a file already parsed once as text (only on the error path)."""
    try:
        return pd.read_csv(path, usecols=[name], dtype=str, index_col=False)[name]
    except _READ_ERRORS as err:
        raise InputError(f"{path}: not a readable CSV file ({first_line(err)})") from None


def _integers_from_objects(series: pd.Series, dtype: np.dtype, path: Path, name: str) -> np.ndarray:
    """Parses a text column value by value into integers; names the first bad value.

    pandas leaves an integer column as text when one value is not a number or lies beyond
    (u)int64, and as float64 when one value has a fraction; both would blur the ~1e18 particle
    ids in float64, so each value is parsed as a Python int. This path runs only on odd files.
    """
    info = np.iinfo(dtype)
    out = np.empty(len(series), dtype=dtype)
    where = f"{path}: column {name!r}"
    for row, value in enumerate(series.tolist()):
        if isinstance(value, bool):
            raise InputError(f"{where} is not numeric (value {value!r} in data row {row + 1})")
        if pd.isna(value):
            raise InputError(f"{where} has an empty or NaN value in data row {row + 1}")
        try:
            if isinstance(value, float):
                raise ValueError  # int(2.5) would silently truncate
            number = int(value)
        except (TypeError, ValueError):
            try:
                real = float(value)
            except (TypeError, ValueError):
                raise InputError(
                    f"{where} is not numeric (value {_short(value)} in data row {row + 1})"
                ) from None
            if np.isnan(real):
                raise InputError(
                    f"{where} has an empty or NaN value in data row {row + 1}"
                ) from None
            if np.isinf(real):
                raise InputError(f"{where} has an infinite value in data row {row + 1}") from None
            if not real.is_integer():
                raise InputError(
                    f"{where} value {_short(value)} in data row {row + 1} is not an integer "
                    f"({dtype} expected)"
                ) from None
            if abs(real) > 2.0**53:
                raise InputError(
                    f"{where} value {_short(value)} in data row {row + 1} is not an exact "
                    f"integer (write it without exponent or decimal point)"
                ) from None
            number = int(real)
        if not info.min <= number <= info.max:
            raise InputError(
                f"{where} value {number} in data row {row + 1} is out of range ({dtype} expected)"
            )
        out[row] = number
    return out


def _short(value: object, width: int = 40) -> str:
    text = repr(value).replace("\n", " ")
    return text if len(text) <= width else text[: width - 3] + "..."
