"""The sweep report: build (fit, allocation, hold-out, planning), figures and Markdown/HTML."""
