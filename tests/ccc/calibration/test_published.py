"""Safe import of the published CCC accuracy matrices: restricted unpickling, validation, download cache."""

from __future__ import annotations

import base64
import builtins
import codecs
import hashlib
import http.server
import os
import pickle
import pickletools
import struct
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from ccc.cache import DownloadError, cache_path_for_url, default_cache_dir
from ccc.calibration import (
    CCC_CORRUPTIONS,
    RESNET50_DIFFICULTY_PRESETS,
    CalibrationError,
    CalibrationTable,
    UnsafePickleError,
    import_ccc_pickle,
    load_calibration,
    published,
    read_matrix_pickle,
)

# Real pickles of {"n1_fog_n2_snow": [[0, 1.5], [3, 4.5]], "n1_snow_n2_fog": [[0, 100], [50, 25.5]]}
# (2×2 to stay small), written by the library versions in the key with `pickle.dumps(obj, protocol=N)`,
# where obj is the plain dict or `pandas.Series(dict)`; pandas' own `to_pickle` uses protocol 5.
REAL_PICKLES = {
    "dict_numpy1.26.4_protocol2": (
        "gAJ9cQAoWA4AAABuMV9mb2dfbjJfc25vd3EBY251bXB5LmNvcmUubXVsdGlhcnJheQpfcmVjb25zdHJ1Y3QKcQJjbnVtcHkK"
        "bmRhcnJheQpxA0sAhXEEY19jb2RlY3MKZW5jb2RlCnEFWAEAAABicQZYBgAAAGxhdGluMXEHhnEIUnEJh3EKUnELKEsBSwJL"
        "AoZxDGNudW1weQpkdHlwZQpxDVgCAAAAZjhxDomIh3EPUnEQKEsDWAEAAAA8cRFOTk5K/////0r/////SwB0cRJiiWgFWCEA"
        "AAAAAAAAAAAAAAAAAAAAAMO4PwAAAAAAAAhAAAAAAAAAEkBxE2gHhnEUUnEVdHEWYlgOAAAAbjFfc25vd19uMl9mb2dxF2gC"
        "aANLAIVxGGgJh3EZUnEaKEsBSwJLAoZxG2gQiWgFWCEAAAAAAAAAAAAAAAAAAAAAAFlAAAAAAAAASUAAAAAAAMKAOUBxHGgH"
        "hnEdUnEedHEfYnUu"
    ),
    "dict_numpy1.26.4_protocol4": (
        "gASVEAEAAAAAAAB9lCiMDm4xX2ZvZ19uMl9zbm93lIwVbnVtcHkuY29yZS5tdWx0aWFycmF5lIwMX3JlY29uc3RydWN0lJOU"
        "jAVudW1weZSMB25kYXJyYXmUk5RLAIWUQwFilIeUUpQoSwFLAksChpRoBYwFZHR5cGWUk5SMAmY4lImIh5RSlChLA4wBPJRO"
        "Tk5K/////0r/////SwB0lGKJQyAAAAAAAAAAAAAAAAAAAPg/AAAAAAAACEAAAAAAAAASQJR0lGKMDm4xX3Nub3dfbjJfZm9n"
        "lGgEaAdLAIWUaAmHlFKUKEsBSwJLAoaUaBGJQyAAAAAAAAAAAAAAAAAAAFlAAAAAAAAASUAAAAAAAIA5QJR0lGJ1Lg=="
    ),
    "dict_numpy1.26.4_protocol5": (
        "gAWV9gAAAAAAAAB9lCiMDm4xX2ZvZ19uMl9zbm93lIwSbnVtcHkuY29yZS5udW1lcmljlIwLX2Zyb21idWZmZXKUk5QoliAA"
        "AAAAAAAAAAAAAAAAAAAAAAAAAAD4PwAAAAAAAAhAAAAAAAAAEkCUjAVudW1weZSMBWR0eXBllJOUjAJmOJSJiIeUUpQoSwOM"
        "ATyUTk5OSv////9K/////0sAdJRiSwJLAoaUjAFDlHSUUpSMDm4xX3Nub3dfbjJfZm9nlGgEKJYgAAAAAAAAAAAAAAAAAAAA"
        "AAAAAAAAWUAAAAAAAABJQAAAAAAAgDlAlGgLSwJLAoaUaA90lFKUdS4="
    ),
    "series_pandas1.5.3_numpy1.26.4_protocol2": (
        "gAJjcGFuZGFzLmNvcmUuc2VyaWVzClNlcmllcwpxACmBcQF9cQIoWAQAAABfbWdycQNjcGFuZGFzLmNvcmUuaW50ZXJuYWxz"
        "Lm1hbmFnZXJzClNpbmdsZUJsb2NrTWFuYWdlcgpxBCmBcQUoXXEGY3BhbmRhcy5jb3JlLmluZGV4ZXMuYmFzZQpfbmV3X0lu"
        "ZGV4CnEHY3BhbmRhcy5jb3JlLmluZGV4ZXMuYmFzZQpJbmRleApxCH1xCShYBAAAAGRhdGFxCmNudW1weS5jb3JlLm11bHRp"
        "YXJyYXkKX3JlY29uc3RydWN0CnELY251bXB5Cm5kYXJyYXkKcQxLAIVxDWNfY29kZWNzCmVuY29kZQpxDlgBAAAAYnEPWAYA"
        "AABsYXRpbjFxEIZxEVJxEodxE1JxFChLAUsChXEVY251bXB5CmR0eXBlCnEWWAIAAABPOHEXiYiHcRhScRkoSwNYAQAAAHxx"
        "Gk5OTkr/////Sv////9LP3RxG2KJXXEcKFgOAAAAbjFfZm9nX24yX3Nub3dxHVgOAAAAbjFfc25vd19uMl9mb2dxHmV0cR9i"
        "WAQAAABuYW1lcSBOdYZxIVJxImFdcSNoC2gMSwCFcSRoEodxJVJxJihLAUsChXEnaBmJXXEoKGgLaAxLAIVxKWgSh3EqUnEr"
        "KEsBSwJLAoZxLGgWWAIAAABmOHEtiYiHcS5ScS8oSwNYAQAAADxxME5OTkr/////Sv////9LAHRxMWKJaA5YIQAAAAAAAAAA"
        "AAAAAAAAAAAAw7g/AAAAAAAACEAAAAAAAAASQHEyaBCGcTNScTR0cTViaAtoDEsAhXE2aBKHcTdScTgoSwFLAksChnE5aC+J"
        "aA5YIQAAAAAAAAAAAAAAAAAAAAAAWUAAAAAAAABJQAAAAAAAwoA5QHE6aBCGcTtScTx0cT1iZXRxPmJhXXE/aAdoCH1xQCho"
        "CmgLaAxLAIVxQWgSh3FCUnFDKEsBSwKFcURoGYldcUUoaB1oHmV0cUZiaCBOdYZxR1JxSGF9cUlYBgAAADAuMTQuMXFKfXFL"
        "KFgEAAAAYXhlc3FMaAZYBgAAAGJsb2Nrc3FNXXFOfXFPKFgGAAAAdmFsdWVzcVBoJlgIAAAAbWdyX2xvY3NxUWNfX2J1aWx0"
        "aW5fXwpzbGljZQpxUksASwJLAYdxU1JxVHVhdXN0cVViWAQAAABfdHlwcVZYBgAAAHNlcmllc3FXWAkAAABfbWV0YWRhdGFx"
        "WF1xWWggYVgFAAAAYXR0cnNxWn1xW1gGAAAAX2ZsYWdzcVx9cV1YFwAAAGFsbG93c19kdXBsaWNhdGVfbGFiZWxzcV6Ic2gg"
        "TnViLg=="
    ),
    "series_pandas1.5.3_numpy1.26.4_protocol4": (
        "gASVGQMAAAAAAACMEnBhbmRhcy5jb3JlLnNlcmllc5SMBlNlcmllc5STlCmBlH2UKIwEX21ncpSMHnBhbmRhcy5jb3JlLmlu"
        "dGVybmFscy5tYW5hZ2Vyc5SMElNpbmdsZUJsb2NrTWFuYWdlcpSTlCmBlChdlIwYcGFuZGFzLmNvcmUuaW5kZXhlcy5iYXNl"
        "lIwKX25ld19JbmRleJSTlGgLjAVJbmRleJSTlH2UKIwEZGF0YZSMFW51bXB5LmNvcmUubXVsdGlhcnJheZSMDF9yZWNvbnN0"
        "cnVjdJSTlIwFbnVtcHmUjAduZGFycmF5lJOUSwCFlEMBYpSHlFKUKEsBSwKFlGgVjAVkdHlwZZSTlIwCTziUiYiHlFKUKEsD"
        "jAF8lE5OTkr/////Sv////9LP3SUYoldlCiMDm4xX2ZvZ19uMl9zbm93lIwObjFfc25vd19uMl9mb2eUZXSUYowEbmFtZZRO"
        "dYaUUpRhXZRoFGgXSwCFlGgZh5RSlChLAUsChZRoIYldlChoFGgXSwCFlGgZh5RSlChLAUsCSwKGlGgejAJmOJSJiIeUUpQo"
        "SwOMATyUTk5OSv////9K/////0sAdJRiiUMgAAAAAAAAAAAAAAAAAAD4PwAAAAAAAAhAAAAAAAAAEkCUdJRiaBRoF0sAhZRo"
        "GYeUUpQoSwFLAksChpRoN4lDIAAAAAAAAAAAAAAAAAAAWUAAAAAAAABJQAAAAAAAgDlAlHSUYmV0lGJhXZRoDWgPfZQoaBFo"
        "FGgXSwCFlGgZh5RSlChLAUsChZRoIYldlChoJWgmZXSUYmgoTnWGlFKUYX2UjAYwLjE0LjGUfZQojARheGVzlGgKjAZibG9j"
        "a3OUXZR9lCiMBnZhbHVlc5RoLowIbWdyX2xvY3OUjAhidWlsdGluc5SMBXNsaWNllJOUSwBLAksBh5RSlHVhdXN0lGKMBF90"
        "eXCUjAZzZXJpZXOUjAlfbWV0YWRhdGGUXZRoKGGMBWF0dHJzlH2UjAZfZmxhZ3OUfZSMF2FsbG93c19kdXBsaWNhdGVfbGFi"
        "ZWxzlIhzaChOdWIu"
    ),
    "series_pandas1.5.3_numpy1.26.4_protocol5": (
        "gAWVNAMAAAAAAACMEnBhbmRhcy5jb3JlLnNlcmllc5SMBlNlcmllc5STlCmBlH2UKIwEX21ncpSMHnBhbmRhcy5jb3JlLmlu"
        "dGVybmFscy5tYW5hZ2Vyc5SMElNpbmdsZUJsb2NrTWFuYWdlcpSTlCmBlChdlIwYcGFuZGFzLmNvcmUuaW5kZXhlcy5iYXNl"
        "lIwKX25ld19JbmRleJSTlGgLjAVJbmRleJSTlH2UKIwEZGF0YZSMFW51bXB5LmNvcmUubXVsdGlhcnJheZSMDF9yZWNvbnN0"
        "cnVjdJSTlIwFbnVtcHmUjAduZGFycmF5lJOUSwCFlEMBYpSHlFKUKEsBSwKFlGgVjAVkdHlwZZSTlIwCTziUiYiHlFKUKEsD"
        "jAF8lE5OTkr/////Sv////9LP3SUYoldlCiMDm4xX2ZvZ19uMl9zbm93lIwObjFfc25vd19uMl9mb2eUZXSUYowEbmFtZZRO"
        "dYaUUpRhXZRoFGgXSwCFlGgZh5RSlChLAUsChZRoIYldlCiMEm51bXB5LmNvcmUubnVtZXJpY5SMC19mcm9tYnVmZmVylJOU"
        "KJYgAAAAAAAAAAAAAAAAAAAAAAAAAAAA+D8AAAAAAAAIQAAAAAAAABJAlGgejAJmOJSJiIeUUpQoSwOMATyUTk5OSv////9K"
        "/////0sAdJRiSwJLAoaUjAFDlHSUUpRoMyiWIAAAAAAAAAAAAAAAAAAAAAAAAAAAAFlAAAAAAAAASUAAAAAAAIA5QJRoN0sC"
        "SwKGlGg7dJRSlGV0lGJhXZRoDWgPfZQoaBFoFGgXSwCFlGgZh5RSlChLAUsChZRoIYldlChoJWgmZXSUYmgoTnWGlFKUYX2U"
        "jAYwLjE0LjGUfZQojARheGVzlGgKjAZibG9ja3OUXZR9lCiMBnZhbHVlc5RoLowIbWdyX2xvY3OUjAhidWlsdGluc5SMBXNs"
        "aWNllJOUSwBLAksBh5RSlHVhdXN0lGKMBF90eXCUjAZzZXJpZXOUjAlfbWV0YWRhdGGUXZRoKGGMBWF0dHJzlH2UjAZfZmxh"
        "Z3OUfZSMF2FsbG93c19kdXBsaWNhdGVfbGFiZWxzlIhzaChOdWIu"
    ),
    "series_pandas2.2.3_numpy2.1.3_protocol4": (
        "gASVIAMAAAAAAACMEnBhbmRhcy5jb3JlLnNlcmllc5SMBlNlcmllc5STlCmBlH2UKIwEX21ncpSMHnBhbmRhcy5jb3JlLmlu"
        "dGVybmFscy5tYW5hZ2Vyc5SMElNpbmdsZUJsb2NrTWFuYWdlcpSTlCmBlChdlIwYcGFuZGFzLmNvcmUuaW5kZXhlcy5iYXNl"
        "lIwKX25ld19JbmRleJSTlGgLjAVJbmRleJSTlH2UKIwEZGF0YZSMFm51bXB5Ll9jb3JlLm11bHRpYXJyYXmUjAxfcmVjb25z"
        "dHJ1Y3SUk5SMBW51bXB5lIwHbmRhcnJheZSTlEsAhZRDAWKUh5RSlChLAUsChZRoFYwFZHR5cGWUk5SMAk84lImIh5RSlChL"
        "A4wBfJROTk5K/////0r/////Sz90lGKJXZQojA5uMV9mb2dfbjJfc25vd5SMDm4xX3Nub3dfbjJfZm9nlGV0lGKMBG5hbWWU"
        "TnWGlFKUYV2UaBRoF0sAhZRoGYeUUpQoSwFLAoWUaCGJXZQoaBRoF0sAhZRoGYeUUpQoSwFLAksChpRoHowCZjiUiYiHlFKU"
        "KEsDjAE8lE5OTkr/////Sv////9LAHSUYolDIAAAAAAAAAAAAAAAAAAA+D8AAAAAAAAIQAAAAAAAABJAlHSUYmgUaBdLAIWU"
        "aBmHlFKUKEsBSwJLAoaUaDeJQyAAAAAAAAAAAAAAAAAAAFlAAAAAAAAASUAAAAAAAIA5QJR0lGJldJRiYV2UaA1oD32UKGgR"
        "aBRoF0sAhZRoGYeUUpQoSwFLAoWUaCGJXZQoaCVoJmV0lGJoKE51hpRSlGF9lIwGMC4xNC4xlH2UKIwEYXhlc5RoCowGYmxv"
        "Y2tzlF2UfZQojAZ2YWx1ZXOUaC6MCG1ncl9sb2NzlIwIYnVpbHRpbnOUjAVzbGljZZSTlEsASwJLAYeUUpR1YXVzdJRijARf"
        "dHlwlIwGc2VyaWVzlIwJX21ldGFkYXRhlF2UjAVfbmFtZZRhjAVhdHRyc5R9lIwGX2ZsYWdzlH2UjBdhbGxvd3NfZHVwbGlj"
        "YXRlX2xhYmVsc5SIc2hgTnViLg=="
    ),
    "series_pandas3.1.1_numpy2.4.6_protocol4": (
        "gASVwwMAAAAAAACMBnBhbmRhc5SMBlNlcmllc5STlCmBlH2UKIwEX21ncpSMHnBhbmRhcy5jb3JlLmludGVybmFscy5tYW5h"
        "Z2Vyc5SMElNpbmdsZUJsb2NrTWFuYWdlcpSTlCmBlChdlIwYcGFuZGFzLmNvcmUuaW5kZXhlcy5iYXNllIwKX25ld19JbmRl"
        "eJSTlGgAjAVJbmRleJSTlH2UKIwEZGF0YZSME3BhbmRhcy5fbGlicy5hcnJheXOUjBxfX3B5eF91bnBpY2tsZV9OREFycmF5"
        "QmFja2VklJOUjA1wYW5kYXMuYXJyYXlzlIwLU3RyaW5nQXJyYXmUk5RKHwbxBE6HlFKUaACMC1N0cmluZ0R0eXBllJOUjAZw"
        "eXRob26UR3/4AAAAAAAAhpRSlIwWbnVtcHkuX2NvcmUubXVsdGlhcnJheZSMDF9yZWNvbnN0cnVjdJSTlIwFbnVtcHmUjAdu"
        "ZGFycmF5lJOUSwCFlEMBYpSHlFKUKEsBSwKFlGgijAVkdHlwZZSTlIwCTziUiYiHlFKUKEsDjAF8lE5OTkr/////Sv////9L"
        "P3SUYoldlCiMDm4xX2ZvZ19uMl9zbm93lIwObjFfc25vd19uMl9mb2eUZXSUYoaUYowEbmFtZZROdYaUUpRhXZRoIWgkSwCF"
        "lGgmh5RSlChLAUsChZRoLoldlChoIWgkSwCFlGgmh5RSlChLAUsCSwKGlGgrjAJmOJSJiIeUUpQoSwOMATyUTk5OSv////9K"
        "/////0sAdJRiiUMgAAAAAAAAAAAAAAAAAAD4PwAAAAAAAAhAAAAAAAAAEkCUdJRiaCFoJEsAhZRoJoeUUpQoSwFLAksChpRo"
        "RYlDIAAAAAAAAAAAAAAAAAAAWUAAAAAAAABJQAAAAAAAgDlAlHSUYmV0lGJhXZRoDWgPfZQoaBFoFGgXSh8G8QROh5RSlGge"
        "aCFoJEsAhZRoJoeUUpQoSwFLAoWUaC6JXZQoaDJoM2V0lGJ9lIwJX3JlYWRvbmx5lIlzh5RiaDZOdYaUUpRhfZSMBjAuMTQu"
        "MZR9lCiMBGF4ZXOUaAqMBmJsb2Nrc5RdlH2UKIwGdmFsdWVzlGg8jAhtZ3JfbG9jc5SMCGJ1aWx0aW5zlIwFc2xpY2WUk5RL"
        "AEsCSwGHlFKUdWF1c3SUYowEX3R5cJSMBnNlcmllc5SMCV9tZXRhZGF0YZRdlIwFX25hbWWUYYwFYXR0cnOUfZSMBl9mbGFn"
        "c5R9lIwXYWxsb3dzX2R1cGxpY2F0ZV9sYWJlbHOUiHNoc051Yi4="
    ),
    "series_pandas3.1.1_numpy2.4.6_protocol5": (
        "gAWV3wMAAAAAAACMBnBhbmRhc5SMBlNlcmllc5STlCmBlH2UKIwEX21ncpSMHnBhbmRhcy5jb3JlLmludGVybmFscy5tYW5h"
        "Z2Vyc5SMElNpbmdsZUJsb2NrTWFuYWdlcpSTlCmBlChdlIwYcGFuZGFzLmNvcmUuaW5kZXhlcy5iYXNllIwKX25ld19JbmRl"
        "eJSTlGgAjAVJbmRleJSTlH2UKIwEZGF0YZSME3BhbmRhcy5fbGlicy5hcnJheXOUjBxfX3B5eF91bnBpY2tsZV9OREFycmF5"
        "QmFja2VklJOUjA1wYW5kYXMuYXJyYXlzlIwLU3RyaW5nQXJyYXmUk5RKHwbxBE6HlFKUaACMC1N0cmluZ0R0eXBllJOUjAZw"
        "eXRob26UR3/4AAAAAAAAhpRSlIwWbnVtcHkuX2NvcmUubXVsdGlhcnJheZSMDF9yZWNvbnN0cnVjdJSTlIwFbnVtcHmUjAdu"
        "ZGFycmF5lJOUSwCFlEMBYpSHlFKUKEsBSwKFlGgijAVkdHlwZZSTlIwCTziUiYiHlFKUKEsDjAF8lE5OTkr/////Sv////9L"
        "P3SUYoldlCiMDm4xX2ZvZ19uMl9zbm93lIwObjFfc25vd19uMl9mb2eUZXSUYoaUYowEbmFtZZROdYaUUpRhXZRoIWgkSwCF"
        "lGgmh5RSlChLAUsChZRoLoldlCiME251bXB5Ll9jb3JlLm51bWVyaWOUjAtfZnJvbWJ1ZmZlcpSTlCiWIAAAAAAAAAAAAAAA"
        "AAAAAAAAAAAAAPg/AAAAAAAACEAAAAAAAAASQJRoK4wCZjiUiYiHlFKUKEsDjAE8lE5OTkr/////Sv////9LAHSUYksCSwKG"
        "lIwBQ5R0lFKUaEEoliAAAAAAAAAAAAAAAAAAAAAAAAAAAABZQAAAAAAAAElAAAAAAACAOUCUaEVLAksChpRoSXSUUpRldJRi"
        "YV2UaA1oD32UKGgRaBRoF0ofBvEEToeUUpRoHmghaCRLAIWUaCaHlFKUKEsBSwKFlGguiV2UKGgyaDNldJRifZSMCV9yZWFk"
        "b25seZSJc4eUYmg2TnWGlFKUYX2UjAYwLjE0LjGUfZQojARheGVzlGgKjAZibG9ja3OUXZR9lCiMBnZhbHVlc5RoPIwIbWdy"
        "X2xvY3OUjAhidWlsdGluc5SMBXNsaWNllJOUSwBLAksBh5RSlHVhdXN0lGKMBF90eXCUjAZzZXJpZXOUjAlfbWV0YWRhdGGU"
        "XZSMBV9uYW1llGGMBWF0dHJzlH2UjAZfZmxhZ3OUfZSMF2FsbG93c19kdXBsaWNhdGVfbGFiZWxzlIhzaHNOdWIu"
    ),
}

EXPECTED_SMALL = {
    "n1_fog_n2_snow": np.array([[0.0, 1.5], [3.0, 4.5]]),
    "n1_snow_n2_fog": np.array([[0.0, 100.0], [50.0, 25.5]]),
}
ALL_PAIRS = [(a, b) for a in CCC_CORRUPTIONS for b in CCC_CORRUPTIONS if a != b]


@pytest.fixture(scope="module")
def published_matrices() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    matrices = {f"n1_{a}_n2_{b}": rng.uniform(0.0, 100.0, (21, 21)) for a, b in ALL_PAIRS}
    matrices["n1_fog_n2_snow"][0, 0] = 100.0
    matrices["n1_fog_n2_snow"][20, 20] = 0.0
    return matrices


@pytest.fixture(scope="module")
def published_bytes(published_matrices) -> bytes:
    return pickle.dumps(published_matrices, protocol=4)


# ----------------------------------------------------------------------------- reading pickles
@pytest.mark.parametrize("name", sorted(REAL_PICKLES))
def test_real_numpy_and_pandas_pickles_are_read(name):
    mapping = read_matrix_pickle(base64.b64decode("".join(REAL_PICKLES[name])))
    assert sorted(mapping) == sorted(EXPECTED_SMALL)
    for key, expected in EXPECTED_SMALL.items():
        assert mapping[key].dtype == np.float64
        np.testing.assert_array_equal(mapping[key], expected)


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_import_local_pickle_all_protocols(tmp_path, published_matrices, protocol):
    path = tmp_path / "ccc_accuracy_matrix.pickle"
    path.write_bytes(pickle.dumps(published_matrices, protocol=protocol))
    table = import_ccc_pickle(path, progress=False)
    assert table.corruptions == CCC_CORRUPTIONS
    assert len(table.pairs()) == 210
    for a, b in [("fog", "snow"), ("jpeg", "gaussian_noise"), ("elastic", "contrast")]:
        np.testing.assert_array_equal(table.grid(a, b), published_matrices[f"n1_{a}_n2_{b}"])
    np.testing.assert_array_equal(
        table.grid("jpeg_compression", "elastic_transform"), published_matrices["n1_jpeg_n2_elastic"]
    )
    assert (table.image_counts_array == 5000).all()
    assert dict(table.difficulty_presets) == dict(RESNET50_DIFFICULTY_PRESETS)
    metadata = table.metadata
    assert metadata.model_name == "torchvision resnet50 IMAGENET1K_V1 (published CCC calibration)"
    assert metadata.image_count == 5000
    assert metadata.source == str(path)
    assert metadata.source_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_checksum_does_not_depend_on_protocol_or_location(tmp_path, published_matrices):
    checksums = set()
    for protocol in (2, 5):
        path = tmp_path / f"copy{protocol}.pickle"
        path.write_bytes(pickle.dumps(published_matrices, protocol=protocol))
        checksums.add(import_ccc_pickle(path, progress=False).checksum())
    assert len(checksums) == 1


def test_imported_table_round_trips(tmp_path, published_bytes):
    path = tmp_path / "m.pickle"
    path.write_bytes(published_bytes)
    table = import_ccc_pickle(path, progress=False)
    saved = table.save(tmp_path / "table.npz")
    from ccc.calibration import CalibrationTable

    loaded = CalibrationTable.load(saved)
    assert loaded.checksum() == table.checksum()
    assert loaded.metadata == table.metadata


def mutated(matrices: dict, edit) -> bytes:
    copy = {key: np.array(value) for key, value in matrices.items()}
    edit(copy)
    return pickle.dumps(copy, protocol=4)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda m: m.pop("n1_fog_n2_snow"), r"got 209 keys; missing 1 \(e\.g\. \['n1_fog_n2_snow'\]\)"),
        (lambda m: m.update(n1_fog_n2_fog=np.zeros((21, 21))), r"unexpected 1 \(e\.g\. \['n1_fog_n2_fog'\]\)"),
        (lambda m: m.update(n1_rain_n2_fog=np.zeros((21, 21))), r"unexpected 1 \(e\.g\. \['n1_rain_n2_fog'\]\)"),
        (
            lambda m: m.update(n1_fog_n2_snow=np.zeros((21, 20))),
            r"'n1_fog_n2_snow' must be 21×21, got shape \[21, 20\]",
        ),
        (
            lambda m: m["n1_snow_n2_fog"].__setitem__((2, 3), np.nan),
            r"'n1_snow_n2_fog' must be finite .* got nan at \[2, 3\]",
        ),
        (lambda m: m["n1_snow_n2_fog"].__setitem__((0, 1), 100.5), r"got 100\.5 at \[0, 1\]"),
        (lambda m: m["n1_snow_n2_fog"].__setitem__((0, 1), -1.0), r"got -1\.0 at \[0, 1\]"),
        (lambda m: m.update({5: np.zeros((21, 21))}), "matrix keys must be strings, got 5"),
        (lambda m: m.update(n1_fog_n2_snow="text"), "matrix 'n1_fog_n2_snow' must be an array, got str"),
    ],
)
def test_invalid_published_content_is_rejected(tmp_path, published_matrices, edit, match):
    path = tmp_path / "bad.pickle"
    path.write_bytes(mutated(published_matrices, edit))
    with pytest.raises(CalibrationError, match=match) as raised:
        import_ccc_pickle(path, progress=False)
    assert str(raised.value).startswith(f"{path}: ")


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (pickle.dumps([1, 2, 3]), "the pickle holds a list; expected a dict or pandas Series"),
        (b"definitely not a pickle", "not a readable pickle"),
        (b"", "not a readable pickle"),
        (pickle.dumps({"n1_fog_n2_snow": np.zeros((21, 21))})[:-20], "not a readable pickle"),
    ],
)
def test_non_matrix_pickles_are_rejected(tmp_path, content, match):
    path = tmp_path / "x.pickle"
    path.write_bytes(content)
    with pytest.raises(CalibrationError, match=match):
        import_ccc_pickle(path, progress=False)


def test_oversized_file_is_refused_before_reading(tmp_path, monkeypatch, published_bytes):
    monkeypatch.setattr(published, "MAX_PICKLE_BYTES", 1000)
    path = tmp_path / "big.pickle"
    path.write_bytes(published_bytes)
    with pytest.raises(CalibrationError, match="larger than any CCC calibration pickle"):
        import_ccc_pickle(path, progress=False)


def test_missing_file(tmp_path):
    with pytest.raises(CalibrationError, match="cannot read: No such file"):
        import_ccc_pickle(tmp_path / "absent.pickle", progress=False)


# ----------------------------------------------------------------------------- hostile pickles
class Reducer:
    """Pickles to ``function(*arguments)``; unpickling with plain pickle would call it."""

    def __init__(self, function, *arguments):
        self.function = function
        self.arguments = arguments

    def __reduce__(self):
        return (self.function, self.arguments)


def hostile_payloads(marker: Path) -> dict[str, tuple[object, str]]:
    return {
        "os.system": (Reducer(os.system, f"touch {marker}"), r"global (posix|os)\.system"),
        "builtins.eval": (
            Reducer(builtins.eval, f"open({str(marker)!r}, 'w')"),
            r"global (__builtin__|builtins)\.eval",
        ),
        "builtins.exec": (
            Reducer(builtins.exec, f"open({str(marker)!r}, 'w')"),
            r"global (__builtin__|builtins)\.exec",
        ),
        "subprocess.Popen": (Reducer(subprocess.Popen, ["touch", str(marker)]), r"global (subprocess|commands)\.Popen"),
        "builtins.open": (Reducer(builtins.open, str(marker), "w"), r"global (io|__builtin__|builtins)\.open"),
        "numpy.load": (Reducer(np.load, str(marker)), r"global numpy\..*load"),
        "nested in a valid dict": (
            {"n1_fog_n2_snow": np.zeros((21, 21)), "n1_snow_n2_fog": Reducer(os.system, f"touch {marker}")},
            r"global (posix|os)\.system",
        ),
        "array reconstruct of a non-array": (
            Reducer(np.ndarray.__reduce__(np.zeros(1))[0], np.dtype, (0,), b"b"),
            "admitted only for numpy.ndarray",
        ),
        "codec other than latin-1": (Reducer(codecs.encode, "x", "rot13"), "only latin-1 encoding"),
        "dtype from an object": (Reducer(np.dtype, ({"names": ["a"], "formats": ["f8"]},)), "type code string"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "os.system",
        "builtins.eval",
        "builtins.exec",
        "subprocess.Popen",
        "builtins.open",
        "numpy.load",
        "nested in a valid dict",
        "array reconstruct of a non-array",
        "codec other than latin-1",
        "dtype from an object",
    ],
)
@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_hostile_pickles_are_refused_without_running(tmp_path, case, protocol):
    marker = tmp_path / "pwned"
    payload, match = hostile_payloads(marker)[case]
    path = tmp_path / "evil.pickle"
    path.write_bytes(pickle.dumps(payload, protocol=protocol))
    with pytest.raises(UnsafePickleError, match=match):
        import_ccc_pickle(path, progress=False)
    assert not marker.exists()


def test_hostile_payload_really_runs_under_plain_pickle(tmp_path):
    """Control: the payloads above are live, so the assertion that the marker is absent can fail."""
    marker = tmp_path / "pwned"
    payload, _ = hostile_payloads(marker)["builtins.eval"]
    pickle.loads(pickle.dumps(payload)).close()
    assert marker.exists()


def text(value: str) -> bytes:
    """Pickle opcode BINUNICODE pushing ``value``."""
    return b"X" + struct.pack("<I", len(value)) + value.encode()


# BUILD with a (None, {name: value}) state runs setattr(target, name, value) on the object on the stack.
BUILD_ATTACKS = {
    "add a method to a stand-in class": b"\x80\x02cnumpy\nndarray\nN}"
    + text("__call__")
    + b"c_codecs\nencode\ns\x86b.",
    "re-point an admitted function": b"\x80\x02cnumpy\ndtype\nN}" + text("_function") + b"c_codecs\nencode\ns\x86b.",
    # numpy.dtype('f8', align=False, copy=False) would be numpy's shared float64; BUILD makes it big-endian.
    "reach a shared numpy dtype": b"\x80\x02cnumpy\ndtype\n"
    + text("f8")
    + b"\x89\x89\x87R(K\x03"
    + text(">")
    + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb.",
}


@pytest.mark.parametrize("case", sorted(BUILD_ATTACKS))
def test_pickles_cannot_modify_admitted_objects(case):
    try:
        loaded = read_matrix_pickle(BUILD_ATTACKS[case])
    except CalibrationError:
        loaded = None
    assert loaded is None or not isinstance(loaded, dict)
    assert "__call__" not in vars(published._NdarrayType)
    assert published.ADMITTED_GLOBALS[("numpy", "dtype")]._function is published._make_dtype
    # Whatever happened, the importer and numpy still behave: a real pandas pickle parses ...
    mapping = read_matrix_pickle(base64.b64decode("".join(REAL_PICKLES["series_pandas1.5.3_numpy1.26.4_protocol4"])))
    np.testing.assert_array_equal(mapping["n1_snow_n2_fog"], EXPECTED_SMALL["n1_snow_n2_fog"])
    # ... and numpy's own float64 dtype is untouched (still native little-endian).
    assert np.dtype("f8").byteorder == "=" and np.dtype("f8") == np.dtype("<f8")


def test_dataframe_is_refused_with_conversion_hint(tmp_path):
    path = tmp_path / "frame.pickle"
    path.write_bytes(b"\x80\x04cpandas.core.frame\nDataFrame\n)\x81.")
    with pytest.raises(UnsafePickleError, match=r"pandas\.core\.frame\.DataFrame.*convert it once.*pickle\.dump"):
        import_ccc_pickle(path, progress=False)


def test_admitted_globals_are_only_numpy_pandas_and_inert_builtins():
    names = published.admitted_global_names()
    for name in names:
        module = name.split(".")[0]
        assert module in {"numpy", "pandas", "_codecs", "builtins", "__builtin__"}, name
    builtin_names = {name.split(".", 1)[1] for name in names if name.split(".")[0] in {"builtins", "__builtin__"}}
    assert builtin_names == {"bytes", "slice"}
    assert "_codecs.encode" in names


# ----------------------------------------------------------------------------- download and cache
class _Handler(http.server.BaseHTTPRequestHandler):
    timeout = 10

    def do_GET(self):  # noqa: N802 (http.server naming)
        self.server.request_paths.append(self.path)
        status, body, declared_length = self.server.routes.get(self.path, (404, b"no such file", None))
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(declared_length if declared_length is not None else len(body)))
        self.end_headers()
        if self.path.startswith("/slow/"):
            for byte in body:  # a server trickling one byte every 20 ms
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.02)
            return
        self.wfile.write(body)

    def log_message(self, format, *args):  # noqa: A002 (http.server signature)
        return


@pytest.fixture
def server():
    """A local HTTP server on 127.0.0.1 in a daemon thread; shut down after the test."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    httpd.routes = {}
    httpd.request_paths = []
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def url_of(httpd, path: str) -> str:
    return f"http://127.0.0.1:{httpd.server_address[1]}{path}"


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def cache_files(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.rglob("*") if p.is_file())


def test_download_once_then_use_cache(tmp_path, server, published_bytes):
    server.routes["/files/ccc_accuracy_matrix.pickle"] = (200, published_bytes, None)
    url = url_of(server, "/files/ccc_accuracy_matrix.pickle")
    cache = tmp_path / "cache"
    table = import_ccc_pickle(url, cache_dir=cache, progress=False)
    assert len(table.pairs()) == 210
    assert table.metadata.source == url
    assert table.metadata.source_sha256 == hashlib.sha256(published_bytes).hexdigest()
    cached = cache_path_for_url(url, cache)
    assert cached.read_bytes() == published_bytes
    assert cached.name.endswith("-ccc_accuracy_matrix.pickle")
    assert cache_files(cache) == [cached.name]
    again = import_ccc_pickle(url, cache_dir=cache, progress=False)
    assert again.checksum() == table.checksum()
    assert server.request_paths == ["/files/ccc_accuracy_matrix.pickle"]


def test_cache_dir_from_environment(tmp_path, server, published_bytes, monkeypatch):
    monkeypatch.setenv("CCC_CACHE_DIR", str(tmp_path / "env-cache"))
    server.routes["/m.pickle"] = (200, published_bytes, None)
    import_ccc_pickle(url_of(server, "/m.pickle"), progress=True)
    assert cache_path_for_url(url_of(server, "/m.pickle")).is_relative_to(tmp_path / "env-cache")
    assert cache_path_for_url(url_of(server, "/m.pickle")).is_file()


def test_default_cache_dir_resolution(monkeypatch, tmp_path):
    monkeypatch.setenv("CCC_CACHE_DIR", str(tmp_path / "a"))
    assert default_cache_dir() == tmp_path / "a"
    monkeypatch.delenv("CCC_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "ccc"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "ccc"


def test_http_404_is_reported_and_nothing_cached(tmp_path, server):
    cache = tmp_path / "cache"
    with pytest.raises(DownloadError, match=r"failed: HTTP 404"):
        import_ccc_pickle(url_of(server, "/missing.pickle"), cache_dir=cache, progress=False)
    assert cache_files(cache) == []


def test_truncated_download_is_reported_and_nothing_cached(tmp_path, server, published_bytes):
    server.routes["/cut.pickle"] = (200, published_bytes[:5000], len(published_bytes))
    cache = tmp_path / "cache"
    with pytest.raises(DownloadError, match=rf"truncated: received 5000 of {len(published_bytes)} bytes|interrupted"):
        import_ccc_pickle(url_of(server, "/cut.pickle"), cache_dir=cache, progress=False)
    assert cache_files(cache) == []


def test_hostile_download_is_refused_and_not_cached(tmp_path, server):
    marker = tmp_path / "pwned"
    server.routes["/evil.pickle"] = (200, pickle.dumps(Reducer(os.system, f"touch {marker}")), None)
    cache = tmp_path / "cache"
    with pytest.raises(UnsafePickleError, match=r"system"):
        import_ccc_pickle(url_of(server, "/evil.pickle"), cache_dir=cache, progress=False)
    assert not marker.exists()
    assert cache_files(cache) == []


def test_invalid_download_names_the_url_and_is_not_cached(tmp_path, server, published_matrices):
    server.routes["/short.pickle"] = (200, mutated(published_matrices, lambda m: m.pop("n1_fog_n2_snow")), None)
    url = url_of(server, "/short.pickle")
    cache = tmp_path / "cache"
    with pytest.raises(CalibrationError, match=rf"{url}: expected the 210 keys"):
        import_ccc_pickle(url, cache_dir=cache, progress=False)
    assert cache_files(cache) == []


def test_damaged_cached_copy_tells_how_to_recover(tmp_path, server, published_bytes):
    url = url_of(server, "/m.pickle")
    cached = cache_path_for_url(url, tmp_path)
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"garbage")
    with pytest.raises(CalibrationError, match="delete the file to download it again"):
        import_ccc_pickle(url, cache_dir=tmp_path, progress=False)
    assert server.request_paths == []


def test_cache_path_rejects_non_urls(tmp_path):
    with pytest.raises(ValueError, match="url must be an http\\(s\\) URL, got 'ftp://x/y'"):
        cache_path_for_url("ftp://x/y", tmp_path)


def test_download_larger_than_limit_is_refused(tmp_path, server):
    from ccc.cache import download_to_cache

    server.routes["/big.bin"] = (200, b"x" * 5000, None)
    with pytest.raises(DownloadError, match="5000 bytes is more than max_bytes=1000"):
        download_to_cache(url_of(server, "/big.bin"), cache_dir=tmp_path, max_bytes=1000, progress=False)
    assert cache_files(tmp_path) == []


# ----------------------------------------------------------------------------- load_calibration
def test_load_calibration_converts_a_pickle_once_and_reuses_the_cached_table(tmp_path, published_bytes):
    source = tmp_path / "ccc_accuracy_matrix.pickle"
    source.write_bytes(published_bytes)
    cache = tmp_path / "cache"
    table, note = load_calibration(source, cache_dir=cache, progress=False)
    converted = cache / "calibration" / f"published-{hashlib.sha256(published_bytes).hexdigest()[:16]}.npz"
    assert note.startswith(f"converted the published CCC pickle {source} into the table {converted}")
    assert CalibrationTable.load(converted).checksum() == table.checksum()
    again, note = load_calibration(source, cache_dir=cache, progress=False)
    assert again.checksum() == table.checksum() and note.startswith("using the table converted earlier")
    plain, note = load_calibration(converted, cache_dir=cache, progress=False)
    assert plain.checksum() == table.checksum() and note is None


def test_load_calibration_of_a_url_downloads_and_converts_once(tmp_path, server, published_bytes):
    server.routes["/ccc_accuracy_matrix.pickle"] = (200, published_bytes, None)
    url = url_of(server, "/ccc_accuracy_matrix.pickle")
    cache = tmp_path / "cache"
    first, note = load_calibration(url, cache_dir=cache, progress=False)
    assert "converted the published CCC pickle http://127.0.0.1" in note
    second, note = load_calibration(url, cache_dir=cache, progress=False)
    assert second.checksum() == first.checksum() and note.startswith("using the table converted earlier")
    assert server.request_paths == ["/ccc_accuracy_matrix.pickle"]


def test_load_calibration_refuses_a_malicious_pickle_and_a_missing_file(tmp_path):
    malicious = tmp_path / "evil.pickle"
    malicious.write_bytes(pickle.dumps(os.system, protocol=4))
    with pytest.raises(UnsafePickleError):
        load_calibration(malicious, cache_dir=tmp_path / "cache", progress=False)
    with pytest.raises(CalibrationError, match="absent.npz does not exist"):
        load_calibration(tmp_path / "absent.npz", cache_dir=tmp_path / "cache", progress=False)
    assert not (tmp_path / "cache" / "calibration").exists()


# ----------------------------------------------------------------------------- bounded imports (issue 19)
class _DeclaredArray:
    """Pickles to numpy's own array reconstruction with a declared shape and only a little data."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape

    def __reduce__(self):
        return (
            np._core.multiarray._reconstruct,
            (np.ndarray, (0,), b"b"),
            (1, self.shape, np.dtype("O"), False, [None]),
        )


def test_small_opcodes_cannot_build_gigabytes(tmp_path):
    import tracemalloc

    path = tmp_path / "sets.pickle"
    path.write_bytes(b"\x80\x04" + pickle.EMPTY_SET * (4 * 2**20) + pickle.STOP)
    tracemalloc.start()
    try:
        with pytest.raises(CalibrationError, match=r"more than 500,000 opcodes .*refusing to unpickle it"):
            import_ccc_pickle(path, progress=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20 + path.stat().st_size


def test_a_declared_huge_array_and_shared_nested_lists_are_refused():
    with pytest.raises(
        CalibrationError, match=r"array of shape \[1000000000\], more than the limit of 1,048,576 elements"
    ):
        read_matrix_pickle(pickle.dumps({"n1_fog_n2_snow": _DeclaredArray((10**9,))}, protocol=4))
    nested: list = [0.5]
    for _ in range(40):
        nested = [nested, nested]
    data = pickle.dumps({"n1_fog_n2_snow": nested}, protocol=4)
    assert len(data) < 1000
    with pytest.raises(CalibrationError, match=r"matrix 'n1_fog_n2_snow' holds more than 65,536 entries"):
        read_matrix_pickle(data)


def test_nested_list_matrices_stay_within_the_opcode_budget(published_matrices):
    as_lists = {key: value.tolist() for key, value in published_matrices.items()}
    for protocol in (2, 5):
        data = pickle.dumps(as_lists, protocol=protocol)
        assert sum(1 for _ in pickletools.genops(data)) < published.MAX_PICKLE_OPCODES
        assert set(read_matrix_pickle(data)) == set(published_matrices)


def test_a_slow_server_hits_the_overall_time_limit(tmp_path, server):
    from ccc.cache import download_to_cache

    server.routes["/slow/table.pickle"] = (200, b"x" * 500, None)
    with pytest.raises(
        DownloadError, match=r"download of .*/slow/table.pickle was too slow: \d+ bytes after the overall limit"
    ):
        download_to_cache(
            url_of(server, "/slow/table.pickle"), cache_dir=tmp_path, total_timeout_seconds=0.2, progress=False
        )
    assert cache_files(tmp_path) == []


def test_a_killed_download_leaves_no_part_file_behind_for_long(tmp_path, server):
    import fcntl

    from ccc.cache import download_to_cache

    url = url_of(server, "/files/t.bin")
    server.routes["/files/t.bin"] = (200, b"payload", None)
    destination = cache_path_for_url(url, tmp_path)
    destination.parent.mkdir(parents=True)
    abandoned = destination.parent / f".{destination.name}.k1ll3d.part"
    abandoned.write_bytes(b"half")
    live = destination.parent / f".{destination.name}.l1v3.part"
    with open(live, "wb") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # a download still running in another process
        assert download_to_cache(url, cache_dir=tmp_path, progress=False).read_bytes() == b"payload"
        assert not abandoned.exists() and live.exists()
