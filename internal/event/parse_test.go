package event

import "testing"

func TestParseNumber(t *testing.T) {
	tests := []struct {
		in    string
		num   float64
		i     int64
		isInt bool
	}{
		{"0", 0, 0, true},
		{"-0", 0, 0, true},
		{"-0.000e5", 0, 0, true},
		{"42", 42, 42, true},
		{"4.2e1", 42, 42, true},
		{"420e-1", 42, 42, true},
		{"42.000", 42, 42, true},
		{"0.42e2", 42, 42, true},
		{"1.5", 1.5, 0, false},
		{"1e-1", 0.1, 0, false},
		{"1.0000000000000000001", 1, 0, false},
		{"9223372036854775807", 9223372036854775807, 9223372036854775807, true},
		{"9223372036854775808", 9223372036854775808, 0, false},
		{"-9223372036854775808", -9223372036854775808, -9223372036854775808, true},
		{"-9223372036854775809", -9223372036854775809, 0, false},
		{"9.223372036854775807e18", 9223372036854775807, 9223372036854775807, true},
		{"1e19", 1e19, 0, false},
		{"1e18", 1e18, 1e18, true},
		{"1e400", 0, 0, false}, // num is +Inf, checked below
	}
	for _, tc := range tests {
		num, i, isInt := parseNumber([]byte(tc.in))
		if tc.in == "1e400" {
			if num < 1e308 || isInt {
				t.Errorf("parseNumber(%q) = %v, %v", tc.in, num, isInt)
			}
			continue
		}
		if num != tc.num || i != tc.i || isInt != tc.isInt {
			t.Errorf("parseNumber(%q) = %v, %d, %v; want %v, %d, %v", tc.in, num, i, isInt, tc.num, tc.i, tc.isInt)
		}
	}
}

func TestParseRFC3339(t *testing.T) {
	tests := []struct {
		in      string
		ms      int64
		problem string
	}{
		{"1970-01-01T00:00:00Z", 0, ""},
		{"1970-01-01T00:00:00.001Z", 1, ""},
		{"1970-01-01T01:00:00+01:00", 0, ""},
		{"1969-12-31T23:00:00-01:00", 0, ""},
		{"2000-02-29T00:00:00Z", 951782400000, ""},
		{"1900-02-29T00:00:00Z", 0, "date or time out of range"},
		{"2026-13-01T00:00:00Z", 0, "date or time out of range"},
		{"2026-01-01T24:00:00Z", 0, "date or time out of range"},
		{"2026-01-01T00:00:00", 0, "no time zone"},
		{"2026-01-01T00:00:00.5", 0, "no time zone"},
		{"2026-01-01T00:00:00+01:60", 0, "zone offset out of range"},
		{"2026-01-01T00:00:00+01", 0, "not an RFC 3339 date-time"},
		{"2026-01-01T00:00:00Z ", 0, "not an RFC 3339 date-time"},
		{"2026-1-01T00:00:00Z", 0, "not an RFC 3339 date-time"},
		{"+2026-01-01T00:00:00Z", 0, "not an RFC 3339 date-time"},
		{"", 0, "not an RFC 3339 date-time"},
	}
	for _, tc := range tests {
		ms, problem := parseRFC3339([]byte(tc.in))
		if problem != tc.problem || problem == "" && ms != tc.ms {
			t.Errorf("parseRFC3339(%q) = %d, %q; want %d, %q", tc.in, ms, problem, tc.ms, tc.problem)
		}
	}
}
