// Command dlock runs a command under a distributed lock, inspects and breaks
// locks, runs a single-node etcd for local work, shows the races that locks
// and fencing tokens prevent, and benchmarks a backend.
//
//	dlock run [flags] NAME -- CMD [ARGS...]   hold NAME while CMD runs
//	dlock inspect NAME                        who holds NAME, its token and expiry
//	dlock list [PREFIX]                       the locks held or waited on
//	dlock break NAME                          force-release NAME
//	dlock dev                                 a local etcd that dlock commands share
//	dlock ui                                  a live dashboard of the locks, in a web browser
//	dlock demo seckill | dlock demo fencing   the flash-sale race; Kleppmann's paused holder
//	dlock bench                               throughput, latency and fairness of a backend
//	                                          (--primitive: mutex, semaphore, rwmutex or election)
//	dlock verify                              a backend's guarantees under client-side faults
//	dlock completion bash|zsh|fish            a shell completion script
//
// Every command but dev takes --backend URL (or the environment variable
// DLOCK_BACKEND); see "dlock help" for how the default is chosen.
package main
