module modelplane.ai/bench/fleet_server

go 1.24
