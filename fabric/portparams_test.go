package fabric

import (
	"reflect"
	"testing"
)

// TestPortParamsCoverLinkParams: a port keeps every LinkParams field but
// the impairment (impairState holds that), so a field added to
// LinkParams must be added to portParams and paramsOf.
func TestPortParamsCoverLinkParams(t *testing.T) {
	lt, pt := reflect.TypeOf(LinkParams{}), reflect.TypeOf(portParams{})
	for i := 0; i < lt.NumField(); i++ {
		f := lt.Field(i)
		if f.Name == "Impair" {
			continue
		}
		g, ok := pt.FieldByName(f.Name)
		if !ok || g.Type != f.Type {
			t.Errorf("portParams lacks LinkParams.%s (%v)", f.Name, f.Type)
		}
	}
	if pt.NumField() != lt.NumField()-1 {
		t.Errorf("portParams has %d fields, LinkParams %d (one of them Impair)", pt.NumField(), lt.NumField())
	}
}
