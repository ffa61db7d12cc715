package fabric_test

import (
	"testing"

	"github.com/mrlab/mrlab/fabric"
)

func TestNames(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{fabric.EvMark.String(), "mark"},
		{fabric.Event(99).String(), "event(99)"},
		{fabric.DropBlackHole.String(), "black-hole"},
		{fabric.DropReason(42).String(), "drop(42)"},
		{fabric.BtoA.String(), "BtoA"},
		{fabric.DistParetoNormal.String(), "paretonormal"},
		{fabric.LossGemodel.String(), "gemodel"},
		{fabric.ECNRED.String(), "red"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	for in, want := range map[string]fabric.Direction{"AtoB": fabric.AtoB, "b>a": fabric.BtoA, "BOTH": fabric.Both, "": fabric.Both} {
		if got, err := fabric.ParseDirection(in); err != nil || got != want {
			t.Errorf("ParseDirection(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := fabric.ParseDirection("sideways"); err == nil {
		t.Error("ParseDirection accepted sideways")
	}
}
