package main

import (
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

// healthcheckCmd probes a health endpoint: container images without curl
// (distroless) use it as their HEALTHCHECK.
func healthcheckCmd() *cobra.Command {
	var url string
	cmd := &cobra.Command{
		Use:   "healthcheck",
		Short: "Exit 0 when the given health URL answers 200 within 2 seconds",
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl := http.Client{Timeout: 2 * time.Second}
			resp, err := cl.Get(url)
			if err != nil {
				return fmt.Errorf("healthcheck: %w", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("healthcheck: %s answered %s", url, resp.Status)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "url", "http://127.0.0.1:9100/readyz", "URL to probe")
	return cmd
}
