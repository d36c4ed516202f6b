"""Two clear examples of each category, for the classifier's tests."""

EXAMPLES: dict[str, tuple[str, ...]] = {
    "decision": ("We decided to deploy on Kubernetes from now on.",
                 "After the review we agreed to drop the legacy API."),
    "preference": ("I prefer dark roast coffee in the morning.",
                   "The user hates loud open-plan offices."),
    "task": ("Remind me to renew my passport by Friday.",
             "I need to send the invoice before the deadline."),
    "event": ("Yesterday I attended the product launch meeting.",
              "We went to the Lisbon conference last week."),
    "reflection": ("In hindsight, I realized we should have tested earlier.",
                   "One lesson learned: small batches ship faster."),
    "summary": ("Summary: the user set up the dev environment and fixed two bugs.",
                "In summary, overall the migration went smoothly."),
    "context": ("Currently working on the billing service refactor.",
                "Right now the user is debugging a flaky CI pipeline."),
    "fact": ("My name is Alice and I live in Lisbon.",
             "The capital of Australia is Canberra."),
}
