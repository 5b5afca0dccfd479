package driver

import "context"

// ListByInspect is List for a backend that can enumerate lock names but
// keeps no index of the locks in use: it inspects each name in turn and
// returns, in the order given, those held or waited on. The first error
// ends it.
func ListByInspect(ctx context.Context, names []string, inspect func(context.Context, string) (Info, error)) ([]Info, error) {
	var out []Info
	for _, name := range names {
		in, err := inspect(ctx, name)
		if err != nil {
			return nil, err
		}
		if in.Held || len(in.Waiters) > 0 {
			out = append(out, in)
		}
	}
	return out, nil
}
