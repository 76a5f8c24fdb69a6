module webhookd.example/receiver

go 1.19
