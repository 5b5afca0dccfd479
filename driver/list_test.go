package driver_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/dlock/dlock/driver"
)

func TestListByInspectKeepsHeldAndWaitedOn(t *testing.T) {
	infos := map[string]driver.Info{
		"free":   {Name: "free"},
		"held":   {Name: "held", Held: true, Token: 7},
		"waited": {Name: "waited", Waiters: [][]byte{[]byte(`{"host":"h"}`)}},
	}
	inspect := func(_ context.Context, name string) (driver.Info, error) {
		if in, ok := infos[name]; ok {
			return in, nil
		}
		return driver.Info{}, errors.New("unreachable: " + name)
	}
	got, err := driver.ListByInspect(context.Background(), []string{"waited", "free", "held"}, inspect)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, in := range got {
		names = append(names, in.Name)
	}
	if want := []string{"waited", "held"}; !slices.Equal(names, want) {
		t.Errorf("listed %q, want %q", names, want)
	}
	if _, err := driver.ListByInspect(context.Background(), []string{"held", "gone"}, inspect); err == nil {
		t.Error("an Inspect error was not returned")
	}
}
