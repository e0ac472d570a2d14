package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor/docker"
	"github.com/agentbox/agentbox/executor/kubernetes"
)

// TestPoolFlag: -pool reaches the docker and the kubernetes executor's
// options, and is refused where it has no effect or says something else
// than the kubernetes options do.
func TestPoolFlag(t *testing.T) {
	be, err := Options{Pool: 2}.backend()
	require.NoError(t, err)
	assert.Equal(t, 2, be.(docker.Options).Pool)

	be, err = Options{Executor: "kubernetes", Pool: 2}.backend()
	require.NoError(t, err)
	assert.Equal(t, 2, be.(kubernetes.Options).Pool)
	be, err = Options{Executor: "kubernetes", Kubernetes: kubernetes.Options{Pool: 3}}.backend()
	require.NoError(t, err)
	assert.Equal(t, 3, be.(kubernetes.Options).Pool, "the options' own Pool without -pool")
	_, err = Options{Executor: "kubernetes", Pool: 2, Kubernetes: kubernetes.Options{Pool: 3}}.backend()
	require.ErrorContains(t, err, "-pool 2 differs")

	_, err = Options{Executor: "local", Pool: 1}.backend()
	require.ErrorContains(t, err, "-pool is a docker and kubernetes executor option")
}

// TestSuccessorsFlag: -successors reaches the kubernetes executor's
// options and is refused for the others.
func TestSuccessorsFlag(t *testing.T) {
	be, err := Options{Executor: "kubernetes", Kubernetes: kubernetes.Options{Successors: 4}}.backend()
	require.NoError(t, err)
	assert.Equal(t, 4, be.(kubernetes.Options).Successors)
	for _, kind := range []string{"docker", "local"} {
		_, err = Options{Executor: kind, Kubernetes: kubernetes.Options{Successors: 4}}.backend()
		require.ErrorContains(t, err, "-successors is a kubernetes executor option", kind)
	}
}
