"""Scenario parsing and validation: every bad input names its field; nothing is evaluated."""

from __future__ import annotations

import json

import numpy as np
import pytest

from symbolic_tpde.errors import InputError
from symbolic_tpde.weights import Schedule, make_head, make_weights
from symbolic_tpde.inputs.scenario import builtin_scenarios, load_scenario, loads, parse_scenario

BASE = {"attention": "softmax", "d": 2, "A": [[-1.0, 0.0], [0.0, -0.5]], "V": [[1.0, 0.0], [0.0, 1.0]],
        "alpha0": [0.0, 1.0], "Sigma0": [[1.0, 0.2], [0.2, 0.5]], "T": 1.0}


def with_(**changes):
    data = json.loads(json.dumps(BASE))
    for k, v in changes.items():
        if v is None:
            data.pop(k)
        else:
            data[k] = v
    return data


def field_of(data) -> str:
    with pytest.raises(InputError) as info:
        parse_scenario(data)
    return info.value.field


def test_builtin_scenarios_all_parse():
    names = builtin_scenarios()
    assert "softmax_2d" in names and len(names) >= 5
    for name in names:
        scn = load_scenario(name, gaussian_data=False)   # mixture_* scenarios have non-Gaussian init
        assert scn.Sigma0.shape == (scn.d, scn.d)
        w = scn.weights(0.0)
        assert w.d == scn.d


def test_valid_single_head():
    scn = parse_scenario(BASE)
    w = scn.weights(0.3)
    assert [h.kind for h in w.heads] == ["softmax"]
    np.testing.assert_array_equal(w.heads[0].params["A"], BASE["A"])
    assert scn.schedule.is_constant and scn.T == 1.0


@pytest.mark.parametrize("changes, field", [
    ({"Sigma0": [[1.0, 0.5], [0.0, 1.0]]}, "Sigma0"),            # not symmetric
    ({"Sigma0": [[1.0, 2.0], [2.0, 1.0]]}, "Sigma0"),            # indefinite
    ({"Sigma0": [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0, 0, 1]]}, "Sigma0"),  # wrong shape
    ({"alpha0": [0.0, 1.0, 2.0]}, "alpha0"),
    ({"A": [[1.0, 2.0]]}, "A"),
    ({"V": None}, "V"),                                          # missing parameter
    ({"attention": "softmx"}, "attention"),                      # unknown variant
    ({"Aa": [[1.0]]}, "Aa"),                                     # unknown key
    ({"T": -1.0}, "T"),
    ({"T": None}, "T"),
    ({"d": 0}, "d"),
    ({"A": [[1.0, "x"], [0.0, 1.0]]}, "A"),
])
def test_bad_input_names_field(changes, field):
    assert field_of(with_(**changes)) == field


def test_l2_tau_must_be_positive_and_heads_are_indexed():
    data = with_(attention="l2", A=None, Q=[[1.0, 0.0]], K=[[0.5, 0.5]], tau=-1.0)
    with pytest.raises(InputError, match="tau: must be > 0"):
        parse_scenario(data)
    heads = [{"A": BASE["A"], "V": BASE["V"]}, {"attention": "l2", "Q": [[1.0, 0.0]], "K": [[0.0, 1.0]],
                                                  "V": BASE["V"], "tau": 0.0}]
    assert field_of(with_(A=None, V=None, heads=heads)) == "heads[1].tau"


def test_nan_and_duplicate_keys_rejected_by_the_json_layer():
    with pytest.raises(InputError, match="NaN is not allowed"):
        loads('{"T": NaN}')
    with pytest.raises(InputError, match="given twice"):
        loads('{"T": 1, "T": 2}')
    with pytest.raises(InputError, match="invalid JSON at line 1"):
        loads('{"T": 1,')
    with pytest.raises(InputError, match="contains NaN or Inf"):
        make_head("softmax", A=[[float("nan")]], V=[[1.0]])


def test_layers_inherit_and_switch():
    layers = [{"t_end": 0.5}, {"t_end": 1.0, "A": [[0.5, 0.0], [0.0, 0.5]]}]
    scn = parse_scenario(with_(layers=layers))
    assert scn.schedule.breakpoints(1.0) == [0.5]
    np.testing.assert_array_equal(scn.weights(0.49).heads[0].params["A"], BASE["A"])
    np.testing.assert_array_equal(scn.weights(0.5).heads[0].params["A"], [[0.5, 0.0], [0.0, 0.5]])
    np.testing.assert_array_equal(scn.weights(7.0).heads[0].params["V"], BASE["V"])  # last layer persists
    with pytest.raises(InputError, match=r"layers\[1\].t_end"):
        parse_scenario(with_(layers=[{"t_end": 0.5}, {"t_end": 0.4}]))
    with pytest.raises(InputError, match="< T"):
        parse_scenario(with_(layers=[{"t_end": 0.5}]))


def test_layers_must_share_structure():
    heads2 = [{"A": BASE["A"], "V": BASE["V"]}, {"A": BASE["A"], "V": BASE["V"]}]
    with pytest.raises(InputError, match="same heads"):
        parse_scenario(with_(layers=[{"t_end": 0.5}, {"t_end": 1.0, "heads": heads2}]))


def test_custom_defaults_and_sink_rules():
    w = make_weights([make_head("custom", B=[[1.0, 0.0], [0.0, 1.0]], V=np.eye(2))])
    assert np.all(w.heads[0].params["R"] == 0) and w.heads[0].params["r"].shape == (2,)
    with pytest.raises(InputError, match="only applies to masked"):
        parse_scenario(with_(sink={"mass": 0.1}))
    with pytest.raises(InputError, match=r"sink.mass: must lie in \(0, 1\)"):
        parse_scenario(with_(attention="masked", sink={"mass": 1.5}))


def test_parameters_are_read_only():
    scn = parse_scenario(BASE)
    with pytest.raises(ValueError):
        scn.weights().heads[0].params["A"][0, 0] = 3.0


def test_callable_schedule_is_validated():
    w = make_weights([make_head("softmax", A=np.eye(2), V=np.eye(2))])
    sched = Schedule.from_callable(lambda t: w if t < 1 else "oops")
    assert sched(0.5) is w
    with pytest.raises(InputError, match="expected Weights"):
        sched(2.0)


# -- issue 11: the strict reader, each reported kind of failure as a reproducer ---------------------------------
_BASE = '{"attention": "softmax", "A": %s, "V": [[1]], "alpha0": [0], "Sigma0": [[1]], "T": 1}'


@pytest.mark.parametrize("raw, field, words", [
    ((_BASE % ("[" * 5000 + "1" + "]" * 5000)).encode(), "scenario", "nested"),
    ('{"attention": "softmax"}'.encode("utf-16"), "scenario", "UTF-16"),
    (b'{"attention": "softmax", "A": [[1]], "V": [[1]], "alpha0": [0], "Sigma0": [[1]], "T": 1, "x": "\xff"}',
     "scenario", "UTF-8"),
    (b"\xef\xbb\xbf" + (_BASE % "[[1]]").encode(), "scenario", "byte-order mark"),
    ((_BASE % ("[[" + "9" * 5000 + "]]")).encode(), "A", "5000 digits"),
    ((_BASE % ("[[" + "9" * 400 + "]]")).encode(), "A", "exceeds"),
    ((_BASE % "[[1e300]]").encode(), "A", "exceeds"),
    ((_BASE % '[["1"]]').encode(), "A", "must be a number"),
    ((_BASE % '[[" 2 "]]').encode(), "A", "must be a number"),
    ((_BASE % '[["1_000e-3"]]').encode(), "A", "must be a number"),
    ((_BASE % "[[true]]").encode(), "A", "must be a number"),
    ((_BASE % "[[null]]").encode(), "A", "must be a number"),
    ((_BASE % "[[1e999]]").encode(), "A", "too large"),
    ((_BASE % "[[1]]").replace('"T": 1', '"T": 1e307').encode(), "T", "largest supported horizon"),
    ((_BASE % "[[1]]").replace('"T": 1', '"T": ' + "9" * 5000).encode(), "T", "digits"),
    ((_BASE % "[[1]]").replace('"T": 1', '"T": true').encode(), "T", "number"),
    ((_BASE % "[[1]]").replace('"T": 1', '"T": "1"').encode(), "T", "number"),
    ((_BASE % "[[1]]").replace('"A": [[1]]', '"ffn": [1], "A": [[1]]').encode(), "ffn", "object"),
    ((_BASE % "[[1]]").replace('"softmax"', '"masked"').replace('"A": [[1]]', '"sink": 3, "A": [[1]]').encode(),
     "sink", "object"),
])
def test_strict_reader_refuses_with_the_field(tmp_path, raw, field, words):
    from symbolic_tpde.inputs.scenario import load_scenario

    path = tmp_path / "s.json"
    path.write_bytes(raw)
    with pytest.raises(InputError) as info:
        load_scenario(path)
    assert info.value.field == field and words in info.value.problem, str(info.value)


@pytest.mark.parametrize("key", ["d", "kind", "where", "params"])
def test_reserved_keys_in_a_head_are_refused_by_name(key):
    data = {"attention": "softmax", "heads": [{"A": [[1.0]], "V": [[1.0]], key: 1}], "alpha0": [0.0],
            "Sigma0": [[1.0]], "T": 1.0}
    with pytest.raises(InputError) as info:
        parse_scenario(data)
    assert info.value.field == f"heads[0].{key}"


def test_a_key_with_a_newline_is_escaped_in_the_message():
    data = {**BASE, "bad\nkey": 1}
    with pytest.raises(InputError) as info:
        parse_scenario(data)
    assert "\n" not in str(info.value) and info.value.field == '"bad\\nkey"'
