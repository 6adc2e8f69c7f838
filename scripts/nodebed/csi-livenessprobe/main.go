// Command livenessprobe is the test bed's re-implementation of the CSI
// livenessprobe sidecar (github.com/kubernetes-csi/livenessprobe), built into
// public.ecr.aws/csi-components/livenessprobe:v2.19.0-eksbuild.5, the image
// the aws-ebs-csi-driver chart (2.64.0) runs beside its driver. Upstream's
// source is not served by the Go module proxy at any version, so
// scripts/install-addon-images.sh cannot build it; this program follows
// upstream's cmd/livenessprobe/main.go and README.md at tag v2.19.0:
//
//   - flags --csi-address (default /run/csi/socket), --health-port (default
//     9808), --http-endpoint (replaces the port; not with --health-port or
//     --metrics-address), --probe-timeout (default 3s), and klog's -v/--v and
//     --logging-format;
//   - at start, it connects to the driver's socket, waiting as long as it
//     takes (upstream never crashes while the driver is not up yet), and
//     calls Identity.GetPluginInfo once for the driver's name (it exits if
//     that fails or the name is empty, as upstream does);
//   - GET /healthz dials the socket and calls Identity.Probe, bounded by
//     --probe-timeout: 200 "ok" when it succeeds and `ready` is not false,
//     500 with the error (or "driver responded but is not ready") otherwise.
//
// What it does not do: Prometheus metrics (--metrics-address, --metrics-path
// are accepted and ignored; nothing listens there), klog's other flags,
// JSON logs (--logging-format accepts only "text"), and --automaxprocs
// (accepted, ignored).
package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const defaultHealthPort = "9808"

var (
	csiAddress    = flag.String("csi-address", "/run/csi/socket", "Address of the CSI driver socket.")
	healthPort    = flag.String("health-port", defaultHealthPort, "TCP port for healthz requests (not with --http-endpoint).")
	httpEndpoint  = flag.String("http-endpoint", "", "TCP address of the healthz server (not with --health-port or --metrics-address).")
	probeTimeout  = flag.Duration("probe-timeout", 3*time.Second, "Probe timeout.")
	metricsAddr   = flag.String("metrics-address", "", "Accepted and ignored: no metrics here.")
	_             = flag.String("metrics-path", "/metrics", "Accepted and ignored: no metrics here.")
	_             = flag.Bool("automaxprocs", false, "Accepted and ignored.")
	loggingFormat = flag.String("logging-format", "text", "Log format: only text.")
	verbosity     = flag.Int("v", 0, "Log level: 5 and above logs every probe.")
)

// dial opens a lazy gRPC connection to the driver's unix socket.
func dial() (*grpc.ClientConn, error) {
	target := *csiAddress
	if !strings.HasPrefix(target, "unix:") {
		target = "unix:" + target
	}
	return grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

func probe(ctx context.Context) error {
	conn, err := dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := csi.NewIdentityClient(conn).Probe(ctx, &csi.ProbeRequest{})
	if err != nil {
		return err
	}
	if r := resp.GetReady(); r != nil && !r.GetValue() {
		return errors.New("driver responded but is not ready")
	}
	return nil
}

func healthz(driver string) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), *probeTimeout)
		defer cancel()
		if err := probe(ctx); err != nil {
			log.Printf("health check of %s failed: %v", driver, err)
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(err.Error()))
			return
		}
		if *verbosity >= 5 {
			log.Printf("health check of %s succeeded", driver)
		}
		_, _ = w.Write([]byte("ok"))
	}
}

func main() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds | log.LUTC)
	flag.Parse()
	switch {
	case *loggingFormat != "text":
		log.Fatalf("--logging-format=%s: only text is supported", *loggingFormat)
	case *healthPort != defaultHealthPort && *httpEndpoint != "":
		log.Fatal("only one of --health-port and --http-endpoint can be explicitly set")
	case *metricsAddr != "" && *httpEndpoint != "":
		log.Fatal("only one of --metrics-address and --http-endpoint can be explicitly set")
	case *metricsAddr != "":
		log.Printf("--metrics-address=%s ignored: this livenessprobe serves no metrics", *metricsAddr)
	}
	addr := *httpEndpoint
	if addr == "" {
		addr = net.JoinHostPort("0.0.0.0", *healthPort)
	}

	conn, err := dial()
	if err != nil {
		log.Fatalf("connecting to the CSI driver at %s: %v", *csiAddress, err)
	}
	log.Printf("calling the CSI driver at %s to discover its name", *csiAddress)
	// No deadline, waiting for the socket: the probe must not crash while
	// the driver starts (upstream connects with no timeout).
	info, err := csi.NewIdentityClient(conn).GetPluginInfo(context.Background(), &csi.GetPluginInfoRequest{}, grpc.WaitForReady(true))
	conn.Close()
	if err == nil && info.GetName() == "" {
		err = errors.New("driver name is empty")
	}
	if err != nil {
		log.Printf("failed to get the CSI driver's name: %v", err)
		os.Exit(1)
	}
	log.Printf("CSI driver name: %s", info.GetName())

	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", healthz(info.GetName()))
	log.Printf("serving /healthz on %s", addr)
	log.Fatal(http.ListenAndServe(addr, mux))
}
