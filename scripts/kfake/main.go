// kfake-server: franz-go's kfake (a fake Kafka cluster written for franz-go's own tests),
// started on given loopback ports so that Korvet's conformance suite can run against a
// third implementation that nobody on this project wrote.
//
//	kfake-server --port 19092 [--port 19093 ...] [-c key=value ...] [--auto-create] [--partitions N]
//
// One --port per broker (default: one broker on a free port). It prints one line
// "listening 127.0.0.1:PORT" per broker once they all accept connections, and stops
// cleanly on SIGTERM or SIGINT. This file is Korvet's code; kfake itself is fetched
// from the Go module proxy at the version go.mod pins (go.sum holds its hashes).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

func main() {
	var ports, configs repeated
	flag.Var(&ports, "port", "a broker's port on 127.0.0.1 (repeat for several brokers; 0 picks one)")
	flag.Var(&configs, "c", "a broker config key=value (repeatable), e.g. -c group.max.size=8")
	autoCreate := flag.Bool("auto-create", true, "Metadata with allow_auto_topic_creation creates topics")
	partitions := flag.Int("partitions", 1, "partitions of an auto-created topic (Kafka's num.partitions)")
	minSession := flag.Duration("group-min-session", 6*time.Second, "group.min.session.timeout.ms")
	flag.Parse()

	var portNumbers []int
	for _, p := range ports {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 65535 {
			fmt.Fprintf(os.Stderr, "kfake-server: bad --port %q\n", p)
			os.Exit(2)
		}
		portNumbers = append(portNumbers, n)
	}
	if len(portNumbers) == 0 {
		portNumbers = []int{0}
	}
	brokerConfigs := map[string]string{}
	for _, kv := range configs {
		key, value, ok := strings.Cut(kv, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "kfake-server: -c wants key=value, got %q\n", kv)
			os.Exit(2)
		}
		brokerConfigs[key] = value
	}

	opts := []kfake.Opt{
		kfake.Ports(portNumbers...),
		kfake.NumBrokers(len(portNumbers)),
		kfake.DefaultNumPartitions(*partitions),
		kfake.GroupMinSessionTimeout(*minSession),
	}
	if *autoCreate {
		opts = append(opts, kfake.AllowAutoTopicCreation())
	}
	if len(brokerConfigs) > 0 {
		opts = append(opts, kfake.BrokerConfigs(brokerConfigs))
	}
	cluster, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kfake-server: %v\n", err)
		os.Exit(1)
	}
	for _, addr := range cluster.ListenAddrs() {
		fmt.Printf("listening %s\n", addr)
	}

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	<-signals
	cluster.Close()
}
