// kfake-server: franz-go's kfake (a fake Kafka cluster written for franz-go's own tests),
// started on given loopback ports so that Korvet's conformance suite can run against a
// third implementation that nobody on this project wrote.
//
//	kfake-server --port 19092 [--port 19093 ...] [-c key=value ...] [--auto-create] [--partitions N]
//	    [--superuser MECHANISM:USER:PASSWORD ...] [--acls]
//	    [--tls-port 19443 --tls-cert broker.pem --tls-key broker.key]
//
// One --port per broker (default: one broker on a free port). It prints one line
// "listening 127.0.0.1:PORT" per broker once they all accept connections, and stops
// cleanly on SIGTERM or SIGINT.
//
// For the conformance suite's security checks: --superuser turns on kfake's SASL (PLAIN,
// SCRAM-SHA-256, SCRAM-SHA-512) with that super user (repeat it for each mechanism), --acls
// its ACL checks, and --tls-port opens a TLS port in front of the first broker (TLS is
// ended here and the bytes go to the broker's port), so that one kfake has a SASL_SSL
// listener beside its plain bootstrap port. kfake's own TLS option would put every port
// behind TLS, and the suite reads ApiVersions without TLS. This file is Korvet's code; kfake itself is fetched
// from the Go module proxy at the version go.mod pins (go.sum holds its hashes).
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
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
	var superusers repeated
	flag.Var(&superusers, "superuser", "MECHANISM:USER:PASSWORD of a SASL super user (repeatable); turns SASL on")
	acls := flag.Bool("acls", false, "check ACLs (super users bypass them)")
	tlsPort := flag.Int("tls-port", -1, "a TLS port on 127.0.0.1 in front of the first broker (0 picks one)")
	tlsCert := flag.String("tls-cert", "", "PEM certificate chain of --tls-port")
	tlsKey := flag.String("tls-key", "", "PEM private key of --tls-cert")
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
	for _, entry := range superusers {
		parts := strings.SplitN(entry, ":", 3)
		if len(parts) != 3 {
			fmt.Fprintf(os.Stderr, "kfake-server: --superuser wants MECHANISM:USER:PASSWORD, got %q\n", entry)
			os.Exit(2)
		}
		opts = append(opts, kfake.Superuser(parts[0], parts[1], parts[2]))
	}
	if len(superusers) > 0 {
		opts = append(opts, kfake.EnableSASL())
	}
	if *acls {
		opts = append(opts, kfake.EnableACLs())
	}
	cluster, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kfake-server: %v\n", err)
		os.Exit(1)
	}
	for _, addr := range cluster.ListenAddrs() {
		fmt.Printf("listening %s\n", addr)
	}
	if *tlsPort >= 0 {
		addr, err := serveTLS(*tlsPort, *tlsCert, *tlsKey, cluster.ListenAddrs()[0])
		if err != nil {
			fmt.Fprintf(os.Stderr, "kfake-server: --tls-port: %v\n", err)
			cluster.Close()
			os.Exit(1)
		}
		fmt.Printf("listening-tls %s\n", addr)
	}

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	<-signals
	cluster.Close()
}

// serveTLS accepts TLS (1.2+) connections on port and relays each one's bytes to target.
func serveTLS(port int, certFile, keyFile, target string) (string, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return "", err
	}
	config := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	listener, err := tls.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port), config)
	if err != nil {
		return "", err
	}
	go func() {
		for {
			client, err := listener.Accept()
			if err != nil {
				return
			}
			go relay(client, target)
		}
	}()
	return listener.Addr().String(), nil
}

// relay copies bytes both ways; when either side closes, both are closed (a connection
// the broker closes is closed for the client too).
func relay(client net.Conn, target string) {
	server, err := net.Dial("tcp", target)
	if err != nil {
		client.Close()
		return
	}
	go func() {
		io.Copy(server, client)
		server.Close()
		client.Close()
	}()
	io.Copy(client, server)
	client.Close()
	server.Close()
}
