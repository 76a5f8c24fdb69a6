module webhookd.example/client

go 1.19
