// Side-by-side benchmarks of dlock against the incumbent Go lock libraries
// of each engine, and the engines' raw round trips, run by make bench:
//
//	go test -count=1 -timeout 30m -run '^TestResults$' -v . -args -results
//
// which starts the servers, runs scenarios A–D and the curves for every
// library, interleaved, and writes RESULTS.md and the curves-*.svg charts.
// See README.md.
package bench
