echo setup
