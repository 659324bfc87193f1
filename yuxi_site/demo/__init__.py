"""The reference site's demo data (`manage.py seed_demo`): an app of the site, not of the
`yuxi-memory` wheel, so no host ever gets its demo users or its staff password."""
