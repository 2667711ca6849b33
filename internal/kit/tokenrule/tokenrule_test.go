package tokenrule

import (
	"errors"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tok := range []int64{0, -1} {
		if err := Check("r", tok); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("Check(%d): %v; want ErrInvalidToken", tok, err)
		}
	}
	if err := Check("r", 1); err != nil {
		t.Errorf("Check(1): %v", err)
	}
}

func TestAdmissible(t *testing.T) {
	for _, c := range []struct {
		token, highest int64
		strict, want   bool
	}{
		{5, 4, false, true}, {5, 5, false, true}, {4, 5, false, false},
		{5, 4, true, true}, {5, 5, true, false}, {4, 5, true, false},
	} {
		if got := Admissible(c.token, c.highest, c.strict); got != c.want {
			t.Errorf("Admissible(%d, %d, strict=%v) = %v; want %v", c.token, c.highest, c.strict, got, c.want)
		}
	}
}
