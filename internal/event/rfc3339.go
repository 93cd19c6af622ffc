package event

import "time"

// parseRFC3339 parses an RFC 3339 date-time with a zone into epoch
// milliseconds, or returns a short description of what is wrong.
//
// Accepted: YYYY-MM-DD "T" hh:mm:ss [ "." 1*DIGIT ] ( "Z" / ("+"/"-") hh:mm ),
// with "t" and "z" also accepted in lower case (RFC 3339 section 5.6).
// Digits of the fraction below the millisecond are truncated. Rejected: a
// missing zone (local time is not an instant), a space instead of "T",
// second 60 (leap seconds cannot be represented in epoch milliseconds), and
// dates that do not exist (2026-02-30). It allocates nothing.
func parseRFC3339(b []byte) (int64, string) {
	const short = "not an RFC 3339 date-time"
	// YYYY-MM-DDThh:mm:ss is 19 bytes.
	if len(b) < 19 || b[4] != '-' || b[7] != '-' || b[13] != ':' || b[16] != ':' {
		return 0, short
	}
	if b[10] != 'T' && b[10] != 't' {
		return 0, short
	}
	year, ok1 := digits(b[0:4])
	month, ok2 := digits(b[5:7])
	day, ok3 := digits(b[8:10])
	hour, ok4 := digits(b[11:13])
	minute, ok5 := digits(b[14:16])
	sec, ok6 := digits(b[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) {
		return 0, short
	}
	if month < 1 || month > 12 || day < 1 || day > daysIn(month, year) ||
		hour > 23 || minute > 59 || sec > 59 {
		return 0, "date or time out of range"
	}
	i := 19
	ms := 0
	if i < len(b) && b[i] == '.' {
		i++
		s := i
		for i < len(b) && isDigit(b[i]) {
			if i-s < 3 {
				ms = ms*10 + int(b[i]-'0')
			}
			i++
		}
		switch i - s {
		case 0:
			return 0, short
		case 1:
			ms *= 100
		case 2:
			ms *= 10
		}
	}
	if i == len(b) {
		return 0, "no time zone"
	}
	offMin := 0
	switch b[i] {
	case 'Z', 'z':
		i++
	case '+', '-':
		if len(b)-i != 6 || b[i+3] != ':' {
			return 0, short
		}
		oh, okh := digits(b[i+1 : i+3])
		om, okm := digits(b[i+4 : i+6])
		if !okh || !okm {
			return 0, short
		}
		if oh > 23 || om > 59 {
			return 0, "zone offset out of range"
		}
		offMin = oh*60 + om
		if b[i] == '-' {
			offMin = -offMin
		}
		i += 6
	default:
		return 0, short
	}
	if i != len(b) {
		return 0, short
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, 0, time.UTC)
	return t.UnixMilli() + int64(ms) - int64(offMin)*60_000, ""
}

func digits(b []byte) (int, bool) {
	n := 0
	for _, c := range b {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
