// Command inferencepool-extension is an Envoy Gateway extension server that
// gives Envoy Gateway v1.9.1 InferencePool backends: the TEST data plane of
// `make cluster` (see README.md). Envoy Gateway calls its hooks over gRPC;
// Envoy fetches the endpoint pickers' endpoints from its EDS service on the
// same listener; it writes InferencePool status.parents.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	pb "github.com/envoyproxy/gateway/proto/extension"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

type flags struct {
	listen         string
	tlsCert        string
	tlsKey         string
	controllerName string
	eppTLS         bool
	messageTimeout time.Duration
	logLevel       string
}

func parseFlags() flags {
	var f flags
	flag.StringVar(&f.listen, "listen", "127.0.0.1:5005",
		"host:port for Envoy Gateway's hooks and Envoy's EDS; the host must be a loopback address")
	flag.StringVar(&f.tlsCert, "tls-cert", "", "serve TLS with this certificate (PEM); with --tls-key. Default: plaintext")
	flag.StringVar(&f.tlsKey, "tls-key", "", "the key of --tls-cert (PEM)")
	flag.StringVar(&f.controllerName, "controller-name", "gateway.envoyproxy.io/gatewayclass-controller",
		"Envoy Gateway's GatewayClass controllerName: whose Gateways' InferencePool status we write")
	flag.BoolVar(&f.eppTLS, "epp-tls", true, "dial endpoint pickers over TLS without verifying their certificate (false: h2c)")
	flag.DurationVar(&f.messageTimeout, "message-timeout", 10*time.Second, "ext_proc message_timeout for each exchange with an EPP")
	flag.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	// --kubeconfig is registered by controller-runtime; KUBECONFIG works too.
	flag.Parse()
	return f
}

// loopbackOnly refuses any listen address off this machine: the hooks can
// rewrite every route of the gateway, and EDS decides where EPP traffic goes.
func loopbackOnly(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--listen %s: the host must be a loopback IP address", addr)
	}
	return nil
}

func main() {
	f := parseFlags()
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		fmt.Fprintln(os.Stderr, "inferencepool-extension: --log-level:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))
	if err := run(f, log); err != nil {
		log.Error("exiting", "err", err)
		os.Exit(1)
	}
}

func run(f flags, log *slog.Logger) error {
	if err := loopbackOnly(f.listen); err != nil {
		return err
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, gwv1.Install, infv1.Install} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"}, // no extra ports
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return err
	}
	edsCache := newEDSCache()
	if err := setupControllers(mgr, edsCache, f.controllerName, log); err != nil {
		return err
	}

	var opts []grpc.ServerOption
	var rootCA []byte // what Envoy's EDS client verifies us against
	if f.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
		if err != nil {
			return err
		}
		if rootCA, err = os.ReadFile(f.tlsCert); err != nil {
			return err
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})))
	}
	srv := grpc.NewServer(opts...)
	pb.RegisterEnvoyGatewayExtensionServer(srv, &hooks{
		rw: &rewriter{
			opts: options{
				XDSAddress: f.listen, XDSRootCA: rootCA,
				EPPTLS: f.eppTLS, MessageTimeout: f.messageTimeout,
			},
			rules: liveRules(mgr.GetAPIReader()),
		},
		log: log,
	})
	endpointservice.RegisterEndpointDiscoveryServiceServer(srv, serverv3.NewServer(ctx, edsCache, nil))

	lis, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	errs := make(chan error, 2)
	go func() { errs <- mgr.Start(ctx) }()
	go func() { errs <- srv.Serve(lis) }()
	log.Info("serving", "listen", f.listen, "tls", f.tlsCert != "", "controllerName", f.controllerName)
	select {
	case <-ctx.Done():
		srv.GracefulStop()
		return nil
	case err := <-errs:
		srv.Stop()
		return err
	}
}
