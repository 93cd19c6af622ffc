// Command processor is the Kafka-native stateful stream processor: `run`
// joins a consumer group and turns vibration events into alerts with
// exactly-once outputs; `demo` runs the whole thing in-process.
package main

import "os"

func main() { os.Exit(execute(os.Args[1:])) }
