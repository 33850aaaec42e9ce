"""hearing/timestamps.py: the reference's fix_timestamp, on its recorded inputs and outputs."""

from fish_core.hearing.timestamps import fix_timestamps, longest_rising


def test_fix_timestamps_matches_the_reference_units(aligner_golden):
    units = aligner_golden.json("units/fix_timestamp")
    assert units
    for unit in units:
        assert fix_timestamps(unit["input"]) == unit["output"], unit["input"]


def test_fix_timestamps_matches_every_aligner_case(aligner_golden, aligner_fixtures):
    for path in sorted((aligner_fixtures / "golden" / "aligner").glob("*.json")):
        case = aligner_golden.json(f"aligner/{path.stem}")
        assert fix_timestamps(case["ts_ms_raw"]) == case["ts_ms_fixed"], path.stem


def test_a_rising_sequence_is_kept_and_the_result_never_falls():
    assert fix_timestamps([0, 80, 80, 160]) == [0, 80, 80, 160]
    assert fix_timestamps([]) == []
    assert longest_rising([]) == []
    noisy = [0.0, 800.0, 160.0, 240.0, 4000.0, 320.0, 400.0, 80.0, 480.0]
    fixed = fix_timestamps(noisy)
    assert all(a <= b for a, b in zip(fixed, fixed[1:]))
